#include "weft/kernels/mod_expr.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "mod_expr_program.h"
#include "weft/base/error.h"

namespace weft::kernels {

using namespace mod_expr_internal;

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
  // "what: problem at column N in 'text'; hint", where the message is
  // "problem; hint" or just "problem".
  template <typename... Args>
  [[noreturn]] void Error(int32_t column, fmt::format_string<Args...> format, Args&&... args) {
    std::string problem = fmt::format(format, std::forward<Args>(args)...), hint;
    if (const size_t semi = problem.find("; "); semi != std::string::npos) {
      hint = problem.substr(semi);
      problem.resize(semi);
    }
    const std::string where =
        column > static_cast<int32_t>(p_.text.size()) ? " (end of input)" : "";
    Fail("{}: {} at column {}{} in '{}'{}", p_.what, problem, column, where, p_.text, hint);
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
    Node n(op, type, column);
    n.shape = shape;
    n.uses_score = op == Op::kScore;
    return Add(std::move(n));
  }
  Type TypeOf(int32_t n) const { return p_.nodes[n].type; }
  int32_t ToFloat(int32_t a) {
    if (TypeOf(a) == Type::kFloat) return a;
    return Add(Node(Op::kToFloat, Type::kFloat, p_.nodes[a].column, {a}));
  }
  void RequireNumber(int32_t a, const std::string& op, const char* side, int32_t column) {
    if (TypeOf(a) == Type::kBool) {
      Error(column, "'{}' needs numbers, but its {} is boolean", op, side);
    }
  }

  // Binary operators and the two-argument functions; checks types, promotes.
  int32_t Binary(Op op, const std::string& name, int32_t a, int32_t b, int32_t column) {
    Node n(op, Type::kBool, column);
    const bool logical = op == Op::kAnd || op == Op::kOr;
    const bool equality = op == Op::kEq || op == Op::kNe;
    if (logical) {
      if (TypeOf(a) != Type::kBool)
        Error(column, "'{}' needs booleans, but its left operand is {}", name, TypeName(TypeOf(a)));
      if (TypeOf(b) != Type::kBool)
        Error(column, "'{}' needs booleans, but its right operand is {}", name,
              TypeName(TypeOf(b)));
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
      Error(column,
            "the branches of '?:' must both be boolean or both numbers, but they are {} and {}",
            TypeName(TypeOf(a)), TypeName(TypeOf(b)));
    }
    if (TypeOf(a) != TypeOf(b)) {
      a = ToFloat(a);
      b = ToFloat(b);
    }
    return Add(Node(Op::kSelect, TypeOf(a), column, {cond, a, b}));
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
  int32_t Additive() {
    return LeftAssoc({{"+", Op::kAdd}, {"-", Op::kSub}}, &Parser::Multiplicative);
  }
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
      if (negate) result = Add(Node(Op::kNeg, TypeOf(a), column, {a}));
    } else if (Accept("!")) {
      const int32_t a = Unary();
      if (TypeOf(a) != Type::kBool)
        Error(column, "'!' needs a boolean, but its operand is {}", TypeName(TypeOf(a)));
      result = Add(Node(Op::kNot, Type::kBool, column, {a}));
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
        Node n(Op::kIntLit, Type::kInt, t.column);
        n.int_value = t.int_value;
        return Add(std::move(n));
      }
      case Tok::kFloat: {
        Node n(Op::kFloatLit, Type::kFloat, t.column);
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
        if (IsReservedName(name))
          Error(t.column, "'{}' is not a tensor and cannot be indexed", name);
        Error(t.column, "unknown tensor '{}'; known names: {}", name, KnownNames());
      }
      const std::vector<int32_t> indices =
          Arguments("]", fmt::format(" after the indices of '{}'", name));
      const int64_t rank = static_cast<int64_t>(tensor->shape.size());
      if (static_cast<int64_t>(indices.size()) != rank) {
        Error(t.column, "tensor '{}' has shape {} and needs {} indices, but {} were given", name,
              ShapeText(tensor->shape), rank, indices.size());
      }
      for (size_t k = 0; k < indices.size(); ++k) {
        if (TypeOf(indices[k]) != Type::kInt) {
          Error(p_.nodes[indices[k]].column,
                "index {} of tensor '{}' must be an integer, but it is {}", k, name,
                TypeName(TypeOf(indices[k])));
        }
      }
      Node n(Op::kGather, tensor->floats ? Type::kFloat : Type::kInt, t.column, indices);
      n.tensor = static_cast<int32_t>(tensor - p_.tensors.begin());
      n.may_fail = true;
      return Add(std::move(n));
    }
    if (name == "true" || name == "false") {
      Node n(Op::kBoolLit, Type::kBool, t.column);
      n.int_value = name == "true";
      return Add(std::move(n));
    }
    if (name == "b") return Leaf(Op::kB, Type::kInt, 0, t.column);
    if (name == "h") return Leaf(Op::kH, Type::kInt, 0, t.column);
    if (name == "q_idx") return Leaf(Op::kQ, Type::kInt, kRow, t.column);
    if (name == "kv_idx") return Leaf(Op::kKv, Type::kInt, kCol, t.column);
    if (name == "score") {
      if (p_.kind == ModExpr::Kind::kScore) return Leaf(Op::kScore, Type::kFloat, kFull, t.column);
      Error(t.column, "'score' is only defined in score expressions; known names: {}",
            KnownNames());
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
      if (args.size() < 2)
        Error(t.column, "'{}' needs at least 2 arguments, but {} were given", name, args.size());
      int32_t result = args[0];
      for (size_t k = 1; k < args.size(); ++k) {
        result = Binary(name == "min" ? Op::kMin : Op::kMax, name, result, args[k], t.column);
      }
      return result;
    }
    if (args.size() != 1)
      Error(t.column, "'{}' needs 1 argument, but {} were given", name, args.size());
    RequireNumber(args[0], name, "argument", t.column);
    Op op = Op::kAbs;
    if (name == "tanh") op = Op::kTanh;
    if (name == "exp") op = Op::kExp;
    if (name == "log") op = Op::kLog;
    if (name == "sqrt") op = Op::kSqrt;
    if (name == "sigmoid") op = Op::kSigmoid;
    const int32_t a = op == Op::kAbs ? args[0] : ToFloat(args[0]);
    return Add(Node(op, TypeOf(a), t.column, {a}));
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
             "mask_expr: a mask must be boolean (e.g. a comparison), but the expression is {} "
             "in '{}'",
             TypeName(t), p->text);
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
             "score_expr: a score mod must be a number, but the expression is boolean in '{}'; "
             "write 'condition ? score : value'",
             p->text);
  if (root.type == Type::kInt) {
    Node n(Op::kToFloat, Type::kFloat, 0, {p->root});
    n.shape = root.shape;
    n.depth = root.depth + 1;
    n.may_fail = root.may_fail;
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
  WEFT_CHECK(impl_->kind == Kind::kMask, "{}: EvaluateMask on a score expression '{}'", impl_->what,
             impl_->text);
  EvaluateMaskTile(*impl_, b, h, q0, nq, k0, nk, keep, ld);
}

std::optional<bool> ModExpr::ClassifyMask(int64_t b, int64_t h, int64_t q0, int64_t q1, int64_t k0,
                                          int64_t k1) const {
  WEFT_CHECK(impl_->kind == Kind::kMask, "{}: ClassifyMask on a score expression '{}'", impl_->what,
             impl_->text);
  WEFT_CHECK(q1 > q0 && k1 > k0, "{}: ClassifyMask of an empty block [{}, {}) x [{}, {})",
             impl_->what, q0, q1, k0, k1);
  return ClassifyMaskBlock(*impl_, b, h, q0, q1, k0, k1);
}

void ModExpr::ApplyScore(int64_t b, int64_t h, int64_t q0, int64_t nq, int64_t k0, int64_t nk,
                         float* scores, int64_t ld, float* grad) const {
  WEFT_CHECK(impl_->kind == Kind::kScore, "{}: ApplyScore on a mask expression '{}'", impl_->what,
             impl_->text);
  ApplyScoreTile(*impl_, b, h, q0, nq, k0, nk, scores, ld, grad);
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

std::string ShapeText(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

}  // namespace weft::kernels
