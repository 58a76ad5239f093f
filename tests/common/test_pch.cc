// The target that owns tests/common/test_pch.h's precompiled header; every
// test reuses it (CMakeLists.txt: weft_add_test).
int main() { return 0; }
