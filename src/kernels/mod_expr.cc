#include "weft/kernels/mod_expr.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <initializer_list>
#include <cmath>
#include <cstring>
#include <vector>

#include "weft/base/error.h"

namespace weft::kernels {
namespace mod_expr_internal {

enum class Type : uint8_t { kBool, kInt, kFloat };

// Which tile axes a node's values vary along; the buffer holds
// (kRow ? nq : 1) x (kCol ? nk : 1) values.
constexpr uint8_t kRow = 1, kCol = 2, kFull = kRow | kCol;

enum class Op : uint8_t {
  kBoolLit, kIntLit, kFloatLit, kB, kH, kQ, kKv, kScore, kGather,
  kToFloat, kNeg, kNot, kAbs, kTanh, kExp, kLog, kSqrt, kSigmoid,
  kAdd, kSub, kMul, kDiv, kMod, kMin, kMax,
  kEq, kNe, kLt, kLe, kGt, kGe, kAnd, kOr, kSelect,
};

struct Node {
  Op op;
  Type type;
  uint8_t shape = 0;
  bool uses_score = false;  // a float that depends on score: carries a derivative
  bool may_fail = false;    // contains a tensor index or an integer division by a variable
  int32_t depth = 1;
  int32_t column = 0;
  std::vector<int32_t> args;  // operands; for kGather the indices
  int64_t int_value = 0;      // kBoolLit, kIntLit
  float float_value = 0;      // kFloatLit
  int32_t tensor = -1;        // kGather: index into Impl::tensors
};

struct TensorInfo {
  std::string name;
  std::vector<int64_t> shape, strides;
  const int64_t* ints = nullptr;  // one of the two is set
  const float* floats = nullptr;
};

}  // namespace mod_expr_internal

using namespace mod_expr_internal;

struct ModExpr::Impl {
  Kind kind = Kind::kMask;
  std::string text;
  std::string what;  // "mask_expr" or "score_expr", the prefix of messages
  std::map<std::string, IndexTensor> index_tensors;
  std::map<std::string, ValueTensor> value_tensors;
  std::vector<TensorInfo> tensors;  // points into the maps above
  std::vector<Node> nodes;
  int32_t root = -1;
};

namespace {

constexpr int32_t kMaxDepth = 256;    // of the tree (evaluation recursion)
constexpr int32_t kMaxNesting = 100;  // of parentheses and unary operators (parser recursion)
const char* const kFunctions[] = {"min", "max", "abs", "tanh", "exp", "log", "sqrt", "sigmoid"};

bool IsIdentStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsIdentChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

const char* TypeName(Type t) {
  return t == Type::kBool ? "boolean" : t == Type::kInt ? "an integer" : "a float";
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

bool IsReservedName(const std::string& name) {
  for (const char* f : kFunctions) {
    if (name == f) return true;
  }
  return name == "b" || name == "h" || name == "q_idx" || name == "kv_idx" || name == "score" ||
         name == "true" || name == "false";
}

// ---------------------------------------------------------------- tokens

enum class Tok : uint8_t { kEnd, kInt, kFloat, kIdent, kOp };

struct Token {
  Tok kind = Tok::kEnd;
  std::string text;
  int32_t column = 0;  // 1-based
  int64_t int_value = 0;
  float float_value = 0;
};

// Length of the number starting at text[i] (digits, fraction, exponent).
size_t NumberLength(const std::string& text, size_t i, bool* is_float) {
  size_t j = i;
  *is_float = false;
  while (j < text.size() && IsDigit(text[j])) ++j;
  if (j < text.size() && text[j] == '.') {
    *is_float = true;
    ++j;
    while (j < text.size() && IsDigit(text[j])) ++j;
  }
  if (j < text.size() && (text[j] == 'e' || text[j] == 'E')) {
    size_t k = j + 1;
    if (k < text.size() && (text[k] == '+' || text[k] == '-')) ++k;
    if (k < text.size() && IsDigit(text[k])) {
      *is_float = true;
      j = k;
      while (j < text.size() && IsDigit(text[j])) ++j;
    }
  }
  return j - i;
}

std::vector<Token> Tokenize(const std::string& text, const std::string& what) {
  auto fail = [&](size_t i, const std::string& message) {
    Fail("{}: {} at column {} in '{}'", what, message, i + 1, text);
  };
  std::vector<Token> tokens;
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    Token t;
    t.column = static_cast<int32_t>(i + 1);
    if (IsDigit(c) || (c == '.' && i + 1 < text.size() && IsDigit(text[i + 1]))) {
      bool is_float = false;
      const size_t n = NumberLength(text, i, &is_float);
      t.text = text.substr(i, n);
      const char* first = text.data() + i;
      if (is_float) {
        t.kind = Tok::kFloat;
        auto r = std::from_chars(first, first + n, t.float_value);
        if (r.ec != std::errc()) fail(i, fmt::format("float literal '{}' is out of range", t.text));
      } else {
        t.kind = Tok::kInt;
        auto r = std::from_chars(first, first + n, t.int_value);
        if (r.ec != std::errc()) {
          fail(i, fmt::format("integer literal '{}' does not fit in 64 bits", t.text));
        }
      }
      if (i + n < text.size() && IsIdentChar(text[i + n])) {
        fail(i + n, fmt::format("unexpected '{}' after the number '{}'", text[i + n], t.text));
      }
      i += n;
    } else if (IsIdentStart(c)) {
      size_t j = i;
      while (j < text.size() && IsIdentChar(text[j])) ++j;
      t.kind = Tok::kIdent;
      t.text = text.substr(i, j - i);
      i = j;
    } else {
      static const char* const kTwo[] = {"==", "!=", "<=", ">=", "&&", "||"};
      t.kind = Tok::kOp;
      for (const char* op : kTwo) {
        if (text.compare(i, 2, op) == 0) t.text = op;
      }
      if (t.text.empty()) {
        if (std::strchr("+-*/%<>!?:()[],", c) == nullptr || c == '\0') {
          if (c == '=') fail(i, "unexpected '=' (write '==' to compare)");
          if (c == '&') fail(i, "unexpected '&' (write '&&')");
          if (c == '|') fail(i, "unexpected '|' (write '||')");
          fail(i, fmt::format("unexpected character '{}'", c));
        }
        t.text = std::string(1, c);
      }
      i += t.text.size();
    }
    tokens.push_back(std::move(t));
  }
  Token end;
  end.column = static_cast<int32_t>(text.size() + 1);
  tokens.push_back(end);
  return tokens;
}

// ---------------------------------------------------------------- parser

class Parser {
 public:
  explicit Parser(ModExpr::Impl& p) : p_(p), tokens_(Tokenize(p.text, p.what)) {}

  int32_t Parse() {
    const int32_t root = Ternary();
    if (Peek().kind != Tok::kEnd) Error(Peek().column, "unexpected '{}'", Peek().text);
    return root;
  }

 private:
  template <typename... Args>
  [[noreturn]] void Error(int32_t column, fmt::format_string<Args...> format, Args&&... args) {
    const std::string where =
        column > static_cast<int32_t>(p_.text.size()) ? " (end of input)" : "";
    Fail("{}: {} at column {}{} in '{}'", p_.what,
         fmt::format(format, std::forward<Args>(args)...), column, where, p_.text);
  }

  const Token& Peek() const { return tokens_[pos_]; }
  bool IsOp(const char* op) const { return Peek().kind == Tok::kOp && Peek().text == op; }
  bool Accept(const char* op) {
    if (!IsOp(op)) return false;
    ++pos_;
    return true;
  }
  void Expect(const char* op, const char* context) {
    if (Accept(op)) return;
    const Token& t = Peek();
    if (t.kind == Tok::kEnd) Error(t.column, "expected '{}'{}", op, context);
    Error(t.column, "expected '{}'{} but found '{}'", op, context, t.text);
  }

  int32_t Add(Node n) {
    for (int32_t a : n.args) {
      const Node& arg = p_.nodes[a];
      n.shape |= arg.shape;
      n.may_fail = n.may_fail || arg.may_fail;
      n.depth = std::max(n.depth, arg.depth + 1);
      if (n.type == Type::kFloat && arg.uses_score) n.uses_score = true;
    }
    if (n.depth > kMaxDepth) Error(n.column, "expression nested more than {} levels", kMaxDepth);
    p_.nodes.push_back(std::move(n));
    return static_cast<int32_t>(p_.nodes.size() - 1);
  }
  int32_t Leaf(Op op, Type type, uint8_t shape, int32_t column) {
    Node n{op, type};
    n.shape = shape;
    n.column = column;
    n.uses_score = op == Op::kScore;
    return Add(std::move(n));
  }
  Type TypeOf(int32_t n) const { return p_.nodes[n].type; }
  int32_t ToFloat(int32_t a) {
    if (TypeOf(a) == Type::kFloat) return a;
    Node n{Op::kToFloat, Type::kFloat};
    n.column = p_.nodes[a].column;
    n.args = {a};
    return Add(std::move(n));
  }
  void RequireNumber(int32_t a, const std::string& op, const char* side, int32_t column) {
    if (TypeOf(a) == Type::kBool) {
      Error(column, "'{}' needs numbers, but its {} is boolean", op, side);
    }
  }

  // Binary operators and the two-argument functions; checks types, promotes.
  int32_t Binary(Op op, const std::string& name, int32_t a, int32_t b, int32_t column) {
    Node n{op, Type::kBool};
    n.column = column;
    const bool logical = op == Op::kAnd || op == Op::kOr;
    const bool equality = op == Op::kEq || op == Op::kNe;
    if (logical) {
      if (TypeOf(a) != Type::kBool) Error(column, "'{}' needs booleans, but its left operand is {}", name, TypeName(TypeOf(a)));
      if (TypeOf(b) != Type::kBool) Error(column, "'{}' needs booleans, but its right operand is {}", name, TypeName(TypeOf(b)));
    } else if (equality && (TypeOf(a) == Type::kBool || TypeOf(b) == Type::kBool)) {
      if (TypeOf(a) != TypeOf(b)) {
        Error(column, "'{}' compares a boolean with a number", name);
      }
    } else {
      RequireNumber(a, name, "left operand", column);
      RequireNumber(b, name, "right operand", column);
      if (TypeOf(a) == Type::kFloat || TypeOf(b) == Type::kFloat) {
        a = ToFloat(a);
        b = ToFloat(b);
      }
      const bool arithmetic = op == Op::kAdd || op == Op::kSub || op == Op::kMul ||
                              op == Op::kDiv || op == Op::kMod || op == Op::kMin || op == Op::kMax;
      if (arithmetic) n.type = TypeOf(a);
      if ((op == Op::kDiv || op == Op::kMod) && n.type == Type::kInt) {
        const Node& d = p_.nodes[b];
        n.may_fail = !(d.op == Op::kIntLit && d.int_value != 0);
      }
    }
    n.args = {a, b};
    return Add(std::move(n));
  }

  int32_t Ternary() {
    const int32_t cond = Or();
    if (!IsOp("?")) return cond;
    const int32_t column = Peek().column;
    ++pos_;
    if (TypeOf(cond) != Type::kBool) {
      Error(column, "the condition of '?:' must be boolean, but it is {}", TypeName(TypeOf(cond)));
    }
    int32_t a = Ternary();
    Expect(":", " in 'condition ? a : b'");
    int32_t b = Ternary();
    if ((TypeOf(a) == Type::kBool) != (TypeOf(b) == Type::kBool)) {
      Error(column, "the branches of '?:' must both be boolean or both numbers, but they are {} and {}",
            TypeName(TypeOf(a)), TypeName(TypeOf(b)));
    }
    if (TypeOf(a) != TypeOf(b)) {
      a = ToFloat(a);
      b = ToFloat(b);
    }
    Node n{Op::kSelect, TypeOf(a)};
    n.column = column;
    n.args = {cond, a, b};
    return Add(std::move(n));
  }

  // One level of left-associative binary operators.
  template <typename Next>
  int32_t LeftAssoc(std::initializer_list<std::pair<const char*, Op>> ops, Next next) {
    int32_t lhs = (this->*next)();
    for (;;) {
      const std::pair<const char*, Op>* match = nullptr;
      for (const auto& op : ops) {
        if (IsOp(op.first)) match = &op;
      }
      if (match == nullptr) return lhs;
      const int32_t column = Peek().column;
      ++pos_;
      const int32_t rhs = (this->*next)();
      lhs = Binary(match->second, match->first, lhs, rhs, column);
    }
  }
  int32_t Or() { return LeftAssoc({{"||", Op::kOr}}, &Parser::And); }
  int32_t And() { return LeftAssoc({{"&&", Op::kAnd}}, &Parser::Equality); }
  int32_t Equality() { return LeftAssoc({{"==", Op::kEq}, {"!=", Op::kNe}}, &Parser::Relational); }
  int32_t Relational() {
    return LeftAssoc({{"<", Op::kLt}, {"<=", Op::kLe}, {">", Op::kGt}, {">=", Op::kGe}},
                     &Parser::Additive);
  }
  int32_t Additive() { return LeftAssoc({{"+", Op::kAdd}, {"-", Op::kSub}}, &Parser::Multiplicative); }
  int32_t Multiplicative() {
    return LeftAssoc({{"*", Op::kMul}, {"/", Op::kDiv}, {"%", Op::kMod}}, &Parser::Unary);
  }

  int32_t Unary() {
    if (++nesting_ > kMaxNesting) {
      Error(Peek().column, "expression nested more than {} levels", kMaxNesting);
    }
    int32_t result;
    const int32_t column = Peek().column;
    if (Accept("-") || Accept("+")) {
      const bool negate = tokens_[pos_ - 1].text == "-";
      const int32_t a = Unary();
      RequireNumber(a, negate ? "-" : "+", "operand", column);
      result = a;
      if (negate) {
        Node n{Op::kNeg, TypeOf(a)};
        n.column = column;
        n.args = {a};
        result = Add(std::move(n));
      }
    } else if (Accept("!")) {
      const int32_t a = Unary();
      if (TypeOf(a) != Type::kBool) Error(column, "'!' needs a boolean, but its operand is {}", TypeName(TypeOf(a)));
      Node n{Op::kNot, Type::kBool};
      n.column = column;
      n.args = {a};
      result = Add(std::move(n));
    } else {
      result = Primary();
    }
    --nesting_;
    return result;
  }

  // Comma-separated expressions up to `close`.
  std::vector<int32_t> Arguments(const char* close, const std::string& context) {
    std::vector<int32_t> args;
    if (IsOp(close)) return args;
    for (;;) {
      args.push_back(Ternary());
      if (Accept(",")) continue;
      Expect(close, context.c_str());
      return args;
    }
  }

  std::string KnownNames() const {
    std::string names = "b, h, q_idx, kv_idx";
    if (p_.kind == ModExpr::Kind::kScore) names += ", score";
    for (const TensorInfo& t : p_.tensors) names += ", " + t.name + "[...]";
    return names;
  }

  int32_t Primary() {
    const Token t = Peek();
    if (t.kind == Tok::kEnd) Error(t.column, "expected an operand");
    ++pos_;
    switch (t.kind) {
      case Tok::kInt: {
        Node n{Op::kIntLit, Type::kInt};
        n.column = t.column;
        n.int_value = t.int_value;
        return Add(std::move(n));
      }
      case Tok::kFloat: {
        Node n{Op::kFloatLit, Type::kFloat};
        n.column = t.column;
        n.float_value = t.float_value;
        return Add(std::move(n));
      }
      case Tok::kIdent:
        return Identifier(t);
      default:
        break;
    }
    if (t.text == "(") {
      const int32_t inner = Ternary();
      Expect(")", " to close '('");
      return inner;
    }
    Error(t.column, "expected an operand but found '{}'", t.text);
  }

  int32_t Identifier(const Token& t) {
    const std::string& name = t.text;
    auto tensor = std::find_if(p_.tensors.begin(), p_.tensors.end(),
                               [&](const TensorInfo& info) { return info.name == name; });
    if (Accept("(")) return Call(t);
    if (Accept("[")) {
      if (tensor == p_.tensors.end()) {
        if (IsReservedName(name)) Error(t.column, "'{}' is not a tensor and cannot be indexed", name);
        Error(t.column, "unknown tensor '{}'; known names: {}", name, KnownNames());
      }
      const std::vector<int32_t> indices = Arguments("]", fmt::format(" after the indices of '{}'", name));
      const int64_t rank = static_cast<int64_t>(tensor->shape.size());
      if (static_cast<int64_t>(indices.size()) != rank) {
        Error(t.column, "tensor '{}' has shape {} and needs {} indices, but {} were given", name,
              ShapeText(tensor->shape), rank, indices.size());
      }
      for (size_t k = 0; k < indices.size(); ++k) {
        if (TypeOf(indices[k]) != Type::kInt) {
          Error(p_.nodes[indices[k]].column, "index {} of tensor '{}' must be an integer, but it is {}",
                k, name, TypeName(TypeOf(indices[k])));
        }
      }
      Node n{Op::kGather, tensor->floats ? Type::kFloat : Type::kInt};
      n.column = t.column;
      n.args = indices;
      n.tensor = static_cast<int32_t>(tensor - p_.tensors.begin());
      n.may_fail = true;
      return Add(std::move(n));
    }
    if (name == "true" || name == "false") {
      Node n{Op::kBoolLit, Type::kBool};
      n.column = t.column;
      n.int_value = name == "true";
      return Add(std::move(n));
    }
    if (name == "b") return Leaf(Op::kB, Type::kInt, 0, t.column);
    if (name == "h") return Leaf(Op::kH, Type::kInt, 0, t.column);
    if (name == "q_idx") return Leaf(Op::kQ, Type::kInt, kRow, t.column);
    if (name == "kv_idx") return Leaf(Op::kKv, Type::kInt, kCol, t.column);
    if (name == "score") {
      if (p_.kind == ModExpr::Kind::kScore) return Leaf(Op::kScore, Type::kFloat, kFull, t.column);
      Error(t.column, "'score' is only defined in score expressions; known names: {}", KnownNames());
    }
    if (tensor != p_.tensors.end()) {
      Error(t.column, "tensor '{}' must be indexed, e.g. {}[{}]", name, name,
            fmt::join(std::vector<std::string>(tensor->shape.size(), "..."), ", "));
    }
    if (IsReservedName(name)) Error(t.column, "'{}' is a function; call it as {}(...)", name, name);
    Error(t.column, "unknown name '{}'; known names: {}", name, KnownNames());
  }

  int32_t Call(const Token& t) {
    const std::string& name = t.text;
    const bool known = std::any_of(std::begin(kFunctions), std::end(kFunctions),
                                   [&](const char* f) { return name == f; });
    if (!known) {
      Error(t.column, "unknown function '{}'; functions are {}", name, fmt::join(kFunctions, ", "));
    }
    std::vector<int32_t> args = Arguments(")", fmt::format(" after the arguments of '{}'", name));
    if (name == "min" || name == "max") {
      if (args.size() < 2) Error(t.column, "'{}' needs at least 2 arguments, but {} were given", name, args.size());
      int32_t result = args[0];
      for (size_t k = 1; k < args.size(); ++k) {
        result = Binary(name == "min" ? Op::kMin : Op::kMax, name, result, args[k], t.column);
      }
      return result;
    }
    if (args.size() != 1) Error(t.column, "'{}' needs 1 argument, but {} were given", name, args.size());
    RequireNumber(args[0], name, "argument", t.column);
    Op op = Op::kAbs;
    if (name == "tanh") op = Op::kTanh;
    if (name == "exp") op = Op::kExp;
    if (name == "log") op = Op::kLog;
    if (name == "sqrt") op = Op::kSqrt;
    if (name == "sigmoid") op = Op::kSigmoid;
    const int32_t a = op == Op::kAbs ? args[0] : ToFloat(args[0]);
    Node n{op, TypeOf(a)};
    n.column = t.column;
    n.args = {a};
    return Add(std::move(n));
  }

  ModExpr::Impl& p_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int32_t nesting_ = 0;
};

template <typename T>
void AddTensors(ModExpr::Impl& p, const std::map<std::string, ModTensor<T>>& tensors) {
  for (const auto& [name, tensor] : tensors) {
    const bool identifier = !name.empty() && IsIdentStart(name[0]) &&
                            std::all_of(name.begin(), name.end(), IsIdentChar);
    WEFT_CHECK(identifier, "{}: tensor name '{}' is not an identifier; use letters, digits and '_'",
               p.what, name);
    WEFT_CHECK(!IsReservedName(name), "{}: tensor name '{}' is a reserved name; rename the tensor",
               p.what, name);
    int64_t numel = 1;
    for (int64_t d : tensor.shape) {
      WEFT_CHECK(d >= 0, "{}: tensor '{}' has a negative dimension in shape {}", p.what, name,
                 ShapeText(tensor.shape));
      numel *= d;
    }
    WEFT_CHECK(static_cast<int64_t>(tensor.values.size()) == numel,
               "{}: tensor '{}' has {} values but its shape {} needs {}", p.what, name,
               tensor.values.size(), ShapeText(tensor.shape), numel);
    TensorInfo info;
    info.name = name;
    info.shape = tensor.shape;
    info.strides.assign(tensor.shape.size(), 1);
    for (int64_t k = static_cast<int64_t>(tensor.shape.size()) - 2; k >= 0; --k) {
      info.strides[k] = info.strides[k + 1] * tensor.shape[k + 1];
    }
    if constexpr (std::is_same_v<T, float>) {
      info.floats = tensor.values.data();
    } else {
      info.ints = tensor.values.data();
    }
    p.tensors.push_back(std::move(info));
  }
}

// ---------------------------------------------------------------- evaluation

// Bump allocator for one evaluation; chunks are never moved, so pointers
// stay valid until released.
class Arena {
 public:
  explicit Arena(size_t first_chunk) : first_(std::max<size_t>(first_chunk, 4096)) {}
  struct Mark {
    size_t chunk, used;
  };
  Mark mark() const { return {current_, used_}; }
  void Release(Mark m) {
    current_ = m.chunk;
    used_ = m.used;
  }
  template <typename T>
  T* Alloc(int64_t count) {
    const size_t bytes = (static_cast<size_t>(count) * sizeof(T) + 63) & ~size_t{63};
    while (current_ < chunks_.size() && used_ + bytes > chunks_[current_].size) {
      ++current_;
      used_ = 0;
    }
    if (current_ == chunks_.size()) {
      const size_t size = std::max(bytes, chunks_.empty() ? first_ : chunks_.back().size * 2);
      chunks_.push_back({std::unique_ptr<std::byte[]>(new std::byte[size]), size});  // not zeroed
    }
    std::byte* p = chunks_[current_].data.get() + used_;
    used_ += bytes;
    return reinterpret_cast<T*>(p);
  }

 private:
  struct Chunk {
    std::unique_ptr<std::byte[]> data;
    size_t size;
  };
  size_t first_;
  std::vector<Chunk> chunks_;
  size_t current_ = 0, used_ = 0;
};

struct Val {
  void* v = nullptr;
  float* d = nullptr;  // d(value)/d(score); null means 0
  uint8_t shape = 0;
  template <typename T>
  T* as() const {
    return static_cast<T*>(v);
  }
};

int64_t Wrap(uint64_t x) { return static_cast<int64_t>(x); }
int64_t FloorDiv(int64_t a, int64_t b) {
  if (b == -1) return Wrap(0 - static_cast<uint64_t>(a));
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
int64_t FloorMod(int64_t a, int64_t b) {
  if (b == -1) return 0;
  const int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
float FloatMod(float a, float b) {
  const float r = std::fmod(a, b);
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

class Evaluator {
 public:
  Evaluator(const ModExpr::Impl& p, int64_t b, int64_t h, int64_t q0, int64_t nq, int64_t k0,
            int64_t nk, bool want_grad)
      : p_(p), b_(b), h_(h), q0_(q0), k0_(k0), nq_(nq), nk_(nk), want_grad_(want_grad),
        arena_(static_cast<size_t>(nq * nk) * 16) {}

  const float* score = nullptr;  // the raw scores, nq x nk contiguous

  int64_t Rows(uint8_t s) const { return s & kRow ? nq_ : 1; }
  int64_t Cols(uint8_t s) const { return s & kCol ? nk_ : 1; }
  int64_t Size(uint8_t s) const { return Rows(s) * Cols(s); }
  // Offset of element (i, j) of the tile in a buffer of shape s.
  int64_t At(uint8_t s, int64_t i, int64_t j) const {
    return (s & kRow ? i * Cols(s) : 0) + (s & kCol ? j : 0);
  }

  Val Eval(int32_t index, const Val* active) {
    const Node& n = p_.nodes[index];
    Val out;
    out.shape = n.shape;
    const int64_t size = Size(n.shape);
    if (n.type == Type::kBool) out.v = arena_.Alloc<uint8_t>(size);
    if (n.type == Type::kInt) out.v = arena_.Alloc<int64_t>(size);
    if (n.type == Type::kFloat) out.v = arena_.Alloc<float>(size);
    if (want_grad_ && n.uses_score) out.d = arena_.Alloc<float>(size);
    const Arena::Mark mark = arena_.mark();
    Compute(n, active, out);
    arena_.Release(mark);
    return out;
  }

  Arena& arena() { return arena_; }

  // out(i, j) = f(a(i, j), b(i, j)) with broadcasting; the inner loop is
  // specialised so that it vectorizes.
  template <typename R, typename A, typename B, typename F>
  void Map2(const Val& out, const Val& a, const Val& b, F f) {
    const int64_t rows = Rows(out.shape), cols = Cols(out.shape);
    const int64_t ars = a.shape & kRow ? Cols(a.shape) : 0;
    const int64_t brs = b.shape & kRow ? Cols(b.shape) : 0;
    const bool ac = a.shape & kCol, bc = b.shape & kCol;
    for (int64_t i = 0; i < rows; ++i) {
      const A* pa = a.as<A>() + i * ars;
      const B* pb = b.as<B>() + i * brs;
      R* po = out.as<R>() + i * cols;
      if (ac && bc) {
        for (int64_t j = 0; j < cols; ++j) po[j] = f(pa[j], pb[j]);
      } else if (ac) {
        const B y = pb[0];
        for (int64_t j = 0; j < cols; ++j) po[j] = f(pa[j], y);
      } else if (bc) {
        const A x = pa[0];
        for (int64_t j = 0; j < cols; ++j) po[j] = f(x, pb[j]);
      } else {
        po[0] = f(pa[0], pb[0]);
      }
    }
  }
  template <typename R, typename A, typename F>
  void Map1(const Val& out, const Val& a, F f) {
    const int64_t size = Size(out.shape);
    const A* pa = a.as<A>();
    R* po = out.as<R>();
    for (int64_t k = 0; k < size; ++k) po[k] = f(pa[k]);
  }

  // A full-tile copy of a float value (itself when already full).
  const float* FullF(const Val& a) {
    if (a.shape == kFull) return a.as<float>();
    float* f = arena_.Alloc<float>(nq_ * nk_);
    for (int64_t i = 0; i < nq_; ++i) {
      for (int64_t j = 0; j < nk_; ++j) f[i * nk_ + j] = a.as<float>()[At(a.shape, i, j)];
    }
    return f;
  }

  // active && cond (or && !cond): the elements where a guarded operand is used.
  Val Guard(const Val* active, const Val& cond, bool negate) {
    Val g;
    g.shape = cond.shape | (active ? active->shape : 0);
    g.v = arena_.Alloc<uint8_t>(Size(g.shape));
    const uint8_t flip = negate ? 1 : 0;
    if (active) {
      Map2<uint8_t, uint8_t, uint8_t>(g, *active, cond,
                                      [=](uint8_t a, uint8_t c) -> uint8_t { return a & (c ^ flip); });
    } else {
      Map1<uint8_t, uint8_t>(g, cond, [=](uint8_t c) -> uint8_t { return c ^ flip; });
    }
    return g;
  }

  // Which elements of a buffer of shape s are used, given the active mask
  // (an element is used when any active tile element maps to it).
  const uint8_t* Needed(const Val* active, uint8_t s) {
    if (active == nullptr) return nullptr;
    uint8_t* need = arena_.Alloc<uint8_t>(Size(s));
    std::fill_n(need, Size(s), uint8_t{0});
    const uint8_t u = s | active->shape;
    for (int64_t i = 0; i < Rows(u); ++i) {
      for (int64_t j = 0; j < Cols(u); ++j) need[At(s, i, j)] |= active->as<uint8_t>()[At(active->shape, i, j)];
    }
    return need;
  }

  [[noreturn]] void FailAt(const Node& n, uint8_t s, int64_t i, int64_t j, const std::string& what) {
    std::string at = fmt::format("b={}, h={}", b_, h_);
    if (s & kRow) at += fmt::format(", q_idx={}", q0_ + i);
    if (s & kCol) at += fmt::format(", kv_idx={}", k0_ + j);
    Fail("{}: {} (at column {} in '{}', evaluated at {})", p_.what, what, n.column, p_.text, at);
  }

  void Gather(const Node& n, const Val* active, const Val& out) {
    const TensorInfo& t = p_.tensors[n.tensor];
    std::vector<Val> idx;
    for (int32_t a : n.args) idx.push_back(Eval(a, active));
    const uint8_t* need = Needed(active, n.shape);
    const int64_t rank = static_cast<int64_t>(idx.size());
    for (int64_t i = 0; i < Rows(n.shape); ++i) {
      for (int64_t j = 0; j < Cols(n.shape); ++j) {
        const int64_t o = At(n.shape, i, j);
        int64_t offset = 0;
        bool used = need == nullptr || need[o];
        for (int64_t k = 0; k < rank && used; ++k) {
          const int64_t x = idx[k].as<int64_t>()[At(idx[k].shape, i, j)];
          if (x < 0 || x >= t.shape[k]) {
            std::vector<int64_t> index;
            for (const Val& v : idx) index.push_back(v.as<int64_t>()[At(v.shape, i, j)]);
            FailAt(n, n.shape, i, j,
                   fmt::format("index {} is out of range for tensor '{}' of shape {} (dimension {} "
                               "is {}); clamp the index with min/max or guard it with a condition",
                               ShapeText(index), t.name, ShapeText(t.shape), k, x));
          }
          offset += x * t.strides[k];
        }
        if (t.floats) {
          out.as<float>()[o] = used ? t.floats[offset] : 0.0f;
        } else {
          out.as<int64_t>()[o] = used ? t.ints[offset] : 0;
        }
      }
    }
  }

  // Integer division or modulo by a divisor that may be zero.
  template <typename F>
  void IntDivide(const Node& n, const Val* active, const Val& out, const Val& a, const Val& b, F f) {
    const int64_t* pb = b.as<int64_t>();
    if (std::find(pb, pb + Size(b.shape), 0) != pb + Size(b.shape)) {
      const uint8_t* need = Needed(active, n.shape);
      for (int64_t i = 0; i < Rows(n.shape); ++i) {
        for (int64_t j = 0; j < Cols(n.shape); ++j) {
          if (pb[At(b.shape, i, j)] == 0 && (need == nullptr || need[At(n.shape, i, j)])) {
            FailAt(n, n.shape, i, j, "integer division by zero; guard the divisor, e.g. max(d, 1)");
          }
        }
      }
    }
    Map2<int64_t, int64_t, int64_t>(out, a, b,
                                    [=](int64_t x, int64_t y) { return y == 0 ? 0 : f(x, y); });
  }

  void Compute(const Node& n, const Val* active, const Val& out);

 private:
  const ModExpr::Impl& p_;
  int64_t b_, h_, q0_, k0_, nq_, nk_;
  bool want_grad_;
  Arena arena_;
};

template <typename T>
void Fill(const Val& out, int64_t size, T value) {
  std::fill_n(out.as<T>(), size, value);
}

void Evaluator::Compute(const Node& n, const Val* active, const Val& out) {
  const int64_t size = Size(n.shape);
  switch (n.op) {
    case Op::kBoolLit: return Fill<uint8_t>(out, 1, static_cast<uint8_t>(n.int_value));
    case Op::kIntLit: return Fill<int64_t>(out, 1, n.int_value);
    case Op::kFloatLit: return Fill<float>(out, 1, n.float_value);
    case Op::kB: return Fill<int64_t>(out, 1, b_);
    case Op::kH: return Fill<int64_t>(out, 1, h_);
    case Op::kQ:
      for (int64_t i = 0; i < nq_; ++i) out.as<int64_t>()[i] = q0_ + i;
      return;
    case Op::kKv:
      for (int64_t j = 0; j < nk_; ++j) out.as<int64_t>()[j] = k0_ + j;
      return;
    case Op::kScore:
      std::copy_n(score, size, out.as<float>());
      if (out.d) std::fill_n(out.d, size, 1.0f);
      return;
    case Op::kGather: return Gather(n, active, out);
    default: break;
  }

  // Guarded operators: the right operand / branches see only the elements
  // that the condition lets through.
  if (n.op == Op::kAnd || n.op == Op::kOr) {
    const Val a = Eval(n.args[0], active);
    Val guard;
    const bool guarded = p_.nodes[n.args[1]].may_fail;
    if (guarded) guard = Guard(active, a, n.op == Op::kOr);
    const Val b = Eval(n.args[1], guarded ? &guard : nullptr);
    if (n.op == Op::kAnd) {
      Map2<uint8_t, uint8_t, uint8_t>(out, a, b, [](uint8_t x, uint8_t y) -> uint8_t { return x & y; });
    } else {
      Map2<uint8_t, uint8_t, uint8_t>(out, a, b, [](uint8_t x, uint8_t y) -> uint8_t { return x | y; });
    }
    return;
  }
  if (n.op == Op::kSelect) {
    const Val c = Eval(n.args[0], active);
    Val guard_t, guard_f;
    const bool gt = p_.nodes[n.args[1]].may_fail, gf = p_.nodes[n.args[2]].may_fail;
    if (gt) guard_t = Guard(active, c, false);
    if (gf) guard_f = Guard(active, c, true);
    const Val t = Eval(n.args[1], gt ? &guard_t : nullptr);
    const Val f = Eval(n.args[2], gf ? &guard_f : nullptr);
    const size_t bytes = n.type == Type::kBool ? 1 : n.type == Type::kInt ? 8 : 4;
    auto* po = static_cast<std::byte*>(out.v);
    for (int64_t i = 0; i < Rows(n.shape); ++i) {
      for (int64_t j = 0; j < Cols(n.shape); ++j) {
        const bool take_t = c.as<uint8_t>()[At(c.shape, i, j)];
        const Val& src = take_t ? t : f;
        std::memcpy(po + At(n.shape, i, j) * bytes,
                    static_cast<const std::byte*>(src.v) + At(src.shape, i, j) * bytes, bytes);
        if (out.d) {
          out.d[At(n.shape, i, j)] = src.d ? src.d[At(src.shape, i, j)] : 0.0f;
        }
      }
    }
    return;
  }

  std::vector<Val> args;
  for (int32_t a : n.args) args.push_back(Eval(a, active));
  const Val& a = args[0];
  const Type at = p_.nodes[n.args[0]].type;

  if (args.size() == 1) {
    const float* da = a.d;
    float* d = out.d;
    switch (n.op) {
      case Op::kToFloat:
        return Map1<float, int64_t>(out, a, [](int64_t x) { return static_cast<float>(x); });
      case Op::kNot: return Map1<uint8_t, uint8_t>(out, a, [](uint8_t x) -> uint8_t { return x ^ 1; });
      case Op::kNeg:
        if (at == Type::kInt) {
          return Map1<int64_t, int64_t>(out, a, [](int64_t x) { return Wrap(0 - static_cast<uint64_t>(x)); });
        }
        Map1<float, float>(out, a, [](float x) { return -x; });
        if (d) for (int64_t k = 0; k < size; ++k) d[k] = -da[k];
        return;
      case Op::kAbs:
        if (at == Type::kInt) {
          return Map1<int64_t, int64_t>(out, a, [](int64_t x) { return x < 0 ? Wrap(0 - static_cast<uint64_t>(x)) : x; });
        }
        Map1<float, float>(out, a, [](float x) { return std::fabs(x); });
        if (d) for (int64_t k = 0; k < size; ++k) d[k] = a.as<float>()[k] < 0 ? -da[k] : da[k];
        return;
      default: break;
    }
    const float* x = a.as<float>();
    const float* y = out.as<float>();
    switch (n.op) {
      case Op::kTanh:
        Map1<float, float>(out, a, [](float v) { return std::tanh(v); });
        if (d) for (int64_t k = 0; k < size; ++k) d[k] = (1.0f - y[k] * y[k]) * da[k];
        return;
      case Op::kExp:
        Map1<float, float>(out, a, [](float v) { return std::exp(v); });
        if (d) for (int64_t k = 0; k < size; ++k) d[k] = y[k] * da[k];
        return;
      case Op::kLog:
        Map1<float, float>(out, a, [](float v) { return std::log(v); });
        if (d) for (int64_t k = 0; k < size; ++k) d[k] = da[k] / x[k];
        return;
      case Op::kSqrt:
        Map1<float, float>(out, a, [](float v) { return std::sqrt(v); });
        if (d) for (int64_t k = 0; k < size; ++k) d[k] = 0.5f * da[k] / y[k];
        return;
      case Op::kSigmoid:
        Map1<float, float>(out, a, [](float v) { return 1.0f / (1.0f + std::exp(-v)); });
        if (d) for (int64_t k = 0; k < size; ++k) d[k] = y[k] * (1.0f - y[k]) * da[k];
        return;
      default: break;
    }
    Fail("{}: internal error: unary op {}", p_.what, static_cast<int>(n.op));
  }

  const Val& b = args[1];
  auto compare = [&](auto tag) {
    using T = decltype(tag);
    switch (n.op) {
      case Op::kEq: return Map2<uint8_t, T, T>(out, a, b, [](T x, T y) -> uint8_t { return x == y; });
      case Op::kNe: return Map2<uint8_t, T, T>(out, a, b, [](T x, T y) -> uint8_t { return x != y; });
      case Op::kLt: return Map2<uint8_t, T, T>(out, a, b, [](T x, T y) -> uint8_t { return x < y; });
      case Op::kLe: return Map2<uint8_t, T, T>(out, a, b, [](T x, T y) -> uint8_t { return x <= y; });
      case Op::kGt: return Map2<uint8_t, T, T>(out, a, b, [](T x, T y) -> uint8_t { return x > y; });
      default: return Map2<uint8_t, T, T>(out, a, b, [](T x, T y) -> uint8_t { return x >= y; });
    }
  };
  if (n.type == Type::kBool) {
    if (at == Type::kBool) return compare(uint8_t{});
    if (at == Type::kInt) return compare(int64_t{});
    return compare(float{});
  }
  if (n.type == Type::kInt) {
    using I = int64_t;
    using U = uint64_t;
    switch (n.op) {
      case Op::kAdd: return Map2<I, I, I>(out, a, b, [](I x, I y) { return Wrap(U(x) + U(y)); });
      case Op::kSub: return Map2<I, I, I>(out, a, b, [](I x, I y) { return Wrap(U(x) - U(y)); });
      case Op::kMul: return Map2<I, I, I>(out, a, b, [](I x, I y) { return Wrap(U(x) * U(y)); });
      case Op::kMin: return Map2<I, I, I>(out, a, b, [](I x, I y) { return y < x ? y : x; });
      case Op::kMax: return Map2<I, I, I>(out, a, b, [](I x, I y) { return y > x ? y : x; });
      case Op::kDiv: return IntDivide(n, active, out, a, b, FloorDiv);
      default: return IntDivide(n, active, out, a, b, FloorMod);
    }
  }
  switch (n.op) {
    case Op::kAdd: Map2<float, float, float>(out, a, b, [](float x, float y) { return x + y; }); break;
    case Op::kSub: Map2<float, float, float>(out, a, b, [](float x, float y) { return x - y; }); break;
    case Op::kMul: Map2<float, float, float>(out, a, b, [](float x, float y) { return x * y; }); break;
    case Op::kDiv: Map2<float, float, float>(out, a, b, [](float x, float y) { return x / y; }); break;
    case Op::kMod: Map2<float, float, float>(out, a, b, FloatMod); break;
    case Op::kMin: Map2<float, float, float>(out, a, b, [](float x, float y) { return y < x ? y : x; }); break;
    default: Map2<float, float, float>(out, a, b, [](float x, float y) { return y > x ? y : x; }); break;
  }
  if (out.d == nullptr) return;
  // Forward-mode derivative; a node that depends on score is a full tile.
  float* d = out.d;
  const float *da = a.d, *db = b.d;
  const float *x = FullF(a), *y = FullF(b), *z = out.as<float>();
  for (int64_t k = 0; k < size; ++k) {
    const float ga = da ? da[k] : 0.0f, gb = db ? db[k] : 0.0f;
    switch (n.op) {
      case Op::kAdd: d[k] = ga + gb; break;
      case Op::kSub: d[k] = ga - gb; break;
      case Op::kMul: d[k] = ga * y[k] + x[k] * gb; break;
      case Op::kDiv: d[k] = db ? (ga - z[k] * gb) / y[k] : ga / y[k]; break;
      case Op::kMod: d[k] = db ? ga - std::floor(x[k] / y[k]) * gb : ga; break;
      case Op::kMin: d[k] = y[k] < x[k] ? gb : ga; break;
      default: d[k] = y[k] > x[k] ? gb : ga; break;
    }
  }
}

void CheckTile(const ModExpr::Impl& p, int64_t nq, int64_t nk, int64_t ld) {
  WEFT_CHECK(nq >= 0 && nk >= 0 && ld >= nk,
             "{}: bad tile nq={}, nk={}, ld={}; need nq, nk >= 0 and ld >= nk", p.what, nq, nk, ld);
}

}  // namespace

ModExpr ModExpr::ParseMask(std::string text, std::map<std::string, IndexTensor> tensors) {
  auto p = std::make_shared<Impl>();
  p->kind = Kind::kMask;
  p->what = "mask_expr";
  p->text = std::move(text);
  p->index_tensors = std::move(tensors);
  AddTensors(*p, p->index_tensors);
  p->root = Parser(*p).Parse();
  const Type t = p->nodes[p->root].type;
  WEFT_CHECK(t == Type::kBool,
             "mask_expr: a mask must be boolean (e.g. a comparison), but '{}' is {}", p->text,
             TypeName(t));
  return ModExpr(std::move(p));
}

ModExpr ModExpr::ParseScore(std::string text, std::map<std::string, ValueTensor> tensors) {
  auto p = std::make_shared<Impl>();
  p->kind = Kind::kScore;
  p->what = "score_expr";
  p->text = std::move(text);
  p->value_tensors = std::move(tensors);
  AddTensors(*p, p->value_tensors);
  p->root = Parser(*p).Parse();
  const Node& root = p->nodes[p->root];
  WEFT_CHECK(root.type != Type::kBool,
             "score_expr: a score mod must be a number, but '{}' is boolean; use "
             "'condition ? score : value'",
             p->text);
  if (root.type == Type::kInt) {
    Node n{Op::kToFloat, Type::kFloat};
    n.shape = root.shape;
    n.depth = root.depth + 1;
    n.may_fail = root.may_fail;
    n.args = {p->root};
    p->nodes.push_back(std::move(n));
    p->root = static_cast<int32_t>(p->nodes.size() - 1);
  }
  return ModExpr(std::move(p));
}

ModExpr::Kind ModExpr::kind() const { return impl_->kind; }
const std::string& ModExpr::text() const { return impl_->text; }
const std::map<std::string, IndexTensor>& ModExpr::index_tensors() const {
  return impl_->index_tensors;
}
const std::map<std::string, ValueTensor>& ModExpr::value_tensors() const {
  return impl_->value_tensors;
}

void ModExpr::EvaluateMask(int64_t b, int64_t h, int64_t q0, int64_t nq, int64_t k0, int64_t nk,
                           uint8_t* keep, int64_t ld) const {
  const Impl& p = *impl_;
  WEFT_CHECK(p.kind == Kind::kMask, "{}: EvaluateMask on a score expression '{}'", p.what, p.text);
  CheckTile(p, nq, nk, ld);
  if (nq == 0 || nk == 0) return;
  Evaluator e(p, b, h, q0, nq, k0, nk, false);
  const Val v = e.Eval(p.root, nullptr);
  for (int64_t i = 0; i < nq; ++i) {
    uint8_t* row = keep + i * ld;
    const uint8_t* src = v.as<uint8_t>() + e.At(v.shape, i, 0);
    if (v.shape & kCol) {
      std::memcpy(row, src, static_cast<size_t>(nk));
    } else {
      std::memset(row, src[0], static_cast<size_t>(nk));
    }
  }
}

void ModExpr::ApplyScore(int64_t b, int64_t h, int64_t q0, int64_t nq, int64_t k0, int64_t nk,
                         float* scores, int64_t ld, float* grad) const {
  const Impl& p = *impl_;
  WEFT_CHECK(p.kind == Kind::kScore, "{}: ApplyScore on a mask expression '{}'", p.what, p.text);
  CheckTile(p, nq, nk, ld);
  if (nq == 0 || nk == 0) return;
  Evaluator e(p, b, h, q0, nq, k0, nk, grad != nullptr);
  float* raw = e.arena().Alloc<float>(nq * nk);
  for (int64_t i = 0; i < nq; ++i) std::copy_n(scores + i * ld, nk, raw + i * nk);
  e.score = raw;
  const Val v = e.Eval(p.root, nullptr);
  for (int64_t i = 0; i < nq; ++i) {
    for (int64_t j = 0; j < nk; ++j) {
      const int64_t at = e.At(v.shape, i, j);
      scores[i * ld + j] = v.as<float>()[at];
      if (grad) grad[i * ld + j] = v.d ? v.d[at] : 0.0f;
    }
  }
}

std::string RenameIdentifiers(const std::string& text,
                              const std::map<std::string, std::string>& renames) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (IsDigit(c) || (c == '.' && i + 1 < text.size() && IsDigit(text[i + 1]))) {
      bool is_float = false;
      size_t n = NumberLength(text, i, &is_float);
      while (i + n < text.size() && IsIdentChar(text[i + n])) ++n;  // a malformed number
      out.append(text, i, n);
      i += n;
    } else if (IsIdentStart(c)) {
      size_t j = i;
      while (j < text.size() && IsIdentChar(text[j])) ++j;
      const std::string name = text.substr(i, j - i);
      auto it = renames.find(name);
      out += it == renames.end() ? name : it->second;
      i = j;
    } else {
      out += c;
      ++i;
    }
  }
  return out;
}

std::string FormatFloatLiteral(float value) {
  if (std::isnan(value)) return "(0.0 / 0.0)";
  if (std::isinf(value)) return value > 0 ? "(1.0 / 0.0)" : "(-1.0 / 0.0)";
  std::string s = fmt::format("{}", value);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

}  // namespace weft::kernels
