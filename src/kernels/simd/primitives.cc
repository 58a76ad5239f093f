// placeholder until the SIMD primitives land
