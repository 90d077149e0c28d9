"""The backward pass of one forward line, derived from its source and written as a learner
writes it: `dW1 = X.T @ dh`, `db1 = dh.sum(0)`, `dcounts = counts_sum_inv * dprobs`.

Reverse mode on the line's syntax tree: the gradient arriving at the line's output is sent down
the expression, each node's rule making the gradient of its operands from its own, until it
reaches the names the line reads. Every node's shape is known (the line was run, in `trial`),
so a broadcast is undone by the sum it needs (`.sum(0)`, `.sum(1, keepdim=True)`) and a size is
written by its name where the file names it (`n`, `n_embd`), else as the number it is.

What comes out is text for the sandbox, never run here: `trial` runs it on the line's tensors
and holds it to autograd's vector-Jacobian product before anything is written. A node with no
rule here raises `Unsupported`, whose message names it; that line's step gets a TODO instead
of a guess. Torch-free, so it can be read and tested on its own.
"""

from __future__ import annotations

import ast
import copy
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from tutor.pack.flow import gradient


class Unsupported(Exception):
    """No rule here differentiates this; the message says what, in a few words."""


@dataclass(frozen=True)
class Fact:
    """What a node of the line evaluated to: a tensor's shape on the main batch and on the fresh
    one (None: not a tensor), whether its gradient is wanted, and a non-tensor's value."""

    shape: tuple[int, ...] | None
    held: tuple[int, ...] | None
    grad: bool = False
    value: object = None


@dataclass
class Up:
    """The gradient arriving at a node: its expression (None: exactly 1, the loss's own) and the
    shape that expression has, which may be one that broadcasts to the node's."""

    expr: ast.expr | None
    shape: tuple[int, ...]
    held: tuple[int, ...]


@dataclass
class Scatter:
    """A gradient that lands on some entries of a tensor: `dx[index] = value`, or an
    accumulating form where an entry may be picked twice."""

    index: ast.expr
    value: ast.expr
    unique: bool  # no entry written twice: a plain assignment is right
    rows: ast.expr | None = None  # one index tensor on dim 0: `index_add_(0, rows, value)`
    rest: tuple[ast.expr, ...] = ()  # the sizes after dim 0, for the rows form's view


@dataclass
class Part:
    """One contribution of the line to an operand's gradient: a whole tensor, or a scatter."""

    expr: ast.expr | None = None
    scatter: Scatter | None = None


@dataclass
class LineBackward:
    target: str
    prelude: list[str] = field(default_factory=list)  # temporaries, in order
    parts: dict[str, list[Part]] = field(default_factory=dict)  # operand -> contributions
    ideas: list[str] = field(default_factory=list)  # what each rule used says, in order
    sums: dict[str, list[int]] = field(default_factory=dict)  # operand -> broadcast dims summed


class Namer:
    """A size as the learner would write it: `n` for the batch, the file's name for one of its
    sizes, else the number; None where the size follows the batch in no simple way."""

    def __init__(self, sizes: dict[str, int | float], n: int, n_held: int):
        self.sizes = {k: v for k, v in sizes.items() if type(v) is int}
        self.n, self.n_held = n, n_held

    def __call__(self, main: int, held: int) -> ast.expr | None:
        if (main, held) == (self.n, self.n_held):
            return _name("n")
        if main == held:
            if main <= 2:
                return ast.Constant(main)
            # A size is written by its name only where one name has that value: with two
            # (`n_embd == head_size`), or none (a count the file never names), the shape says it.
            names = [name for name, value in self.sizes.items() if value == main]
            return _name(names[0]) if len(names) == 1 else None
        if main % self.n == 0 and held % self.n_held == 0 and main // self.n == held // self.n_held:
            k = main // self.n
            return ast.BinOp(_name("n"), ast.Mult(), self(k, k) or ast.Constant(k))
        return None


# -- building expressions ----------------------------------------------------------------------
def _name(name: str) -> ast.Name:
    return ast.Name(name, ast.Load())


def _parse(text: str) -> ast.expr:
    return ast.parse(text, mode="eval").body


def _num(value: float | int) -> ast.expr:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        value = int(value)
    if value < 0:
        return ast.UnaryOp(ast.USub(), ast.Constant(-value))
    return ast.Constant(value)


def _call(func: str, *args: ast.expr, **kw: ast.expr) -> ast.Call:
    return ast.Call(_parse(func), list(args), [ast.keyword(k, v) for k, v in kw.items()])


def _method(obj: ast.expr, name: str, *args: ast.expr, **kw: ast.expr) -> ast.Call:
    return ast.Call(ast.Attribute(obj, name, ast.Load()), list(args),
                    [ast.keyword(k, v) for k, v in kw.items()])


def _dims(dims: list[int]) -> ast.expr:
    return ast.Constant(dims[0]) if len(dims) == 1 else ast.Tuple(
        [ast.Constant(d) for d in dims], ast.Load())


def _const_value(node: ast.expr | None) -> float | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
            and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _const_value(node.operand)
        return None if inner is None else -inner
    return None


def mul(a: ast.expr | None, b: ast.expr | None) -> ast.expr | None:
    """a * b, with the gradient 1 (None) left out."""
    if a is None:
        return b
    if b is None:
        return a
    if _const_value(a) == 1:
        return b
    if _const_value(b) == 1:
        return a
    if _const_value(a) == -1:
        return neg(b)
    return ast.BinOp(a, ast.Mult(), b)


def div(a: ast.expr | None, b: ast.expr) -> ast.expr:
    return ast.BinOp(ast.Constant(1) if a is None else a, ast.Div(), b)


def neg(a: ast.expr | None) -> ast.expr:
    if a is None:
        return _num(-1)
    if isinstance(a, ast.UnaryOp) and isinstance(a.op, ast.USub):
        return a.operand
    return ast.UnaryOp(ast.USub(), a)


def _simple(e: ast.expr | None) -> bool:
    """Cheap enough to write twice: a name, a number, `x.T`."""
    return e is None or isinstance(e, (ast.Name, ast.Constant)) or (
        isinstance(e, ast.UnaryOp) and _simple(e.operand)) or (
        isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name))


def broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x != y and 1 not in (x, y):
            raise Unsupported(f"shapes {list(a)} and {list(b)} do not broadcast")
        out.append(max(x, y) if 1 in (x, y) else x)
    return tuple(reversed(out))


def _norm(dim: int, rank: int) -> int:
    return dim + rank if dim < 0 else dim


def _peel_transpose(node: ast.expr) -> ast.expr | None:
    """X for `X.T`, `X.mT` or `X.transpose(-2, -1)`: undone by writing X."""
    if isinstance(node, ast.Attribute) and node.attr in ("T", "mT"):
        return node.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr in ("transpose", "swapaxes") and len(node.args) == 2 \
            and {_const_value(a) for a in node.args} == {-2, -1}:
        return node.func.value
    return None


# -- the functions a line may call -------------------------------------------------------------
_SIGNATURES: dict[str, tuple[str, ...]] = {}


def _sig(names: str, params: str) -> None:
    for name in names.split():
        _SIGNATURES[name] = tuple(params.split())


_sig("sum mean amax amin max min logsumexp nansum", "input dim keepdim")
_sig("var std", "input dim unbiased keepdim correction")
_sig("softmax log_softmax", "input dim")
_sig("exp log tanh sigmoid relu sqrt rsqrt abs sin cos square neg negative reciprocal log1p "
     "expm1 silu softplus contiguous clone float double t", "input")
_sig("gelu", "input approximate")
_sig("leaky_relu", "input negative_slope")
_sig("clamp clip", "input min max")
_sig("pow", "input exponent")
_sig("view reshape permute expand flip to repeat", "input *rest")
_sig("view_as reshape_as expand_as type_as", "input other")
_sig("broadcast_to", "input size")
_sig("flatten", "input start_dim end_dim")
_sig("unflatten", "input dim sizes")
_sig("squeeze unsqueeze", "input dim")
_sig("transpose swapaxes swapdims", "input dim0 dim1")
_sig("tril triu", "input diagonal")
_sig("masked_fill", "input mask value")
_sig("where", "condition input other")
_sig("cat concat stack", "tensors dim")
_sig("matmul mm bmm", "input other")
_sig("cross_entropy nll_loss", "input target weight size_average ignore_index reduce "
     "reduction label_smoothing")
_sig("mse_loss l1_loss", "input target size_average reduce reduction")
_sig("smooth_l1_loss", "input target size_average reduce reduction beta")
_sig("huber_loss", "input target reduction delta")
_sig("linear", "input weight bias")
_sig("layer_norm", "input normalized_shape weight bias eps")
_sig("embedding", "input weight padding_idx max_norm")
_sig("conv1d conv2d", "input weight bias stride padding dilation groups")
_sig("max_pool1d max_pool2d", "input kernel_size stride padding dilation ceil_mode "
     "return_indices")
_sig("pad", "input pad mode value")
_sig("gather", "input dim index sparse_grad")
_sig("index_select", "input dim index")
_sig("logsigmoid", "input")
_sig("binary_cross_entropy_with_logits", "input target weight size_average reduce reduction "
     "pos_weight")
_sig("normalize", "input p dim eps")
_sig("cosine_similarity", "input other dim eps")
_sig("einsum", "equation *operands")

_MODULES = {"torch", "F", "math", "torch.nn.functional", "torch.special"}
_DEFAULTS = {"keepdim": False, "dim": None, "unbiased": True, "approximate": "none",
             "negative_slope": 0.01, "min": None, "max": None, "diagonal": 0,
             "reduction": "mean", "weight": None, "bias": None, "stride": None, "padding": 0,
             "dilation": 1, "groups": 1, "eps": 1e-5, "mode": "constant", "value": 0,
             "ignore_index": -100, "label_smoothing": 0.0, "start_dim": 0, "end_dim": -1,
             "ceil_mode": False, "return_indices": False, "p": 2.0, "sparse_grad": False,
             "pos_weight": None, "beta": 1.0, "delta": 1.0}

IDEAS = {
    "matmul": "A matrix product sends the gradient back through the other operand: each "
              "operand's gradient is a product of the arriving gradient with the other one, "
              "and the shapes leave one way to order them and place the transpose.",
    "broadcast": "A tensor the line broadcasts (copies along a dimension) collects the "
                 "gradients of all its copies: sum over the dimensions it was copied along.",
    "add": "A sum passes the gradient on unchanged to each of its terms (with a minus sign to "
           "what is subtracted).",
    "mul": "For a product, the local derivative with respect to one factor is the other factor.",
    "div": "For `a / b` the local derivatives are `1 / b` for `a` and `-a / b**2` for `b`.",
    "pow": "The power rule: the derivative of `x**p` is `p * x**(p - 1)`.",
    "exp": "The exponential is its own derivative, and the line's output already holds it.",
    "log": "The derivative of `log(x)` is `1 / x`.",
    "tanh": "The derivative of tanh is `1 - tanh**2`, and the line's output already holds tanh.",
    "sigmoid": "The derivative of the sigmoid is `s * (1 - s)`, with `s` the sigmoid itself.",
    "relu": "ReLU passes the gradient where its input was positive and stops it elsewhere.",
    "gelu": "GELU is `x * Φ(x)`: its derivative is `Φ(x) + x * φ(x)` (the normal CDF and "
            "density), or the derivative of its tanh approximation.",
    "unary": "An element-wise function scales the gradient by its derivative at each entry.",
    "sum": "A sum sends its gradient unchanged to every term it added: spread it back over the "
           "summed dimension.",
    "mean": "A mean is a sum divided by the count: spread the gradient back and divide by the "
            "count.",
    "max": "A max passes the gradient to the entry that was the largest and nothing to the "
           "others.",
    "var": "A variance reads each entry directly and through the mean it subtracts: work out "
           "the direct path of the square and the count it averages over, then ask what the "
           "mean's share adds up to.",
    "softmax": "Every output of a softmax depends on every input of its row, through the sum "
               "that normalises them: besides each entry's own path there is one through that "
               "sum, shared by the whole row.",
    "log_softmax": "A log-softmax is its input minus the log of the row's normalising sum: the "
                   "gradient passes straight through, and the sum's path gives every entry "
                   "of the row a share.",
    "cross_entropy": "Cross-entropy after a softmax has a famously short gradient with respect "
                     "to the logits: it compares the predicted probabilities with the targets, "
                     "and the loss's average over the examples divides it.",
    "index": "Indexing picks entries: the gradient goes back to the entries picked (adding up "
             "where one was picked twice) and is zero elsewhere.",
    "shape": "A view, reshape, transpose or permute only moves entries: undo it on the "
             "gradient.",
    "cat": "A concatenation's gradient is the arriving gradient cut back into the pieces.",
    "mask": "Entries a mask replaced by a constant get no gradient.",
    "layer_norm": "Layernorm's mean and spread are computed from every input of the "
                  "normalised dimension: besides each input's direct path, its gradient has a "
                  "share through the mean and one through the spread.",
    "conv": "A convolution's input gradient is the gradient convolved with the kernel flipped "
            "and its channels swapped; its weight gradient pairs each kernel tap with the "
            "input windows it saw, summed over the batch and the positions.",
    "pool": "Max pooling sends each window's gradient to the entry that was the window's max.",
    "pad": "Padding adds constant entries: the input's gradient is the gradient with the "
           "padding cut off.",
    "linear": "`F.linear(x, W, b)` is `x @ W.T + b`: the matrix-product and broadcast rules.",
    "bce": "Binary cross-entropy on logits is a sigmoid and a log-likelihood in one: like "
           "cross-entropy after a softmax, its gradient compares the predicted probability "
           "with the target, averaged as the loss averages.",
    "normalize": "Normalising divides by the length, which depends on every entry: besides "
                 "the direct path, each entry's gradient loses the part that would only "
                 "change the length.",
    "einsum": "An einsum is a sum of products: each operand's gradient is an einsum of the "
              "arriving gradient with the other operands, with the operand's own indices as "
              "the output.",
    "robust": "A loss of the difference, entry by entry, sends back its slope at each "
              "difference (a sign, or the difference clipped), over the count it averages.",
    "mse": "A mean squared error is the square of a difference, averaged: the square's "
           "derivative, the sign each side of the difference takes, and the count.",
}


PRIORITY = ("conv", "layer_norm", "bce", "normalize", "einsum", "cross_entropy", "log_softmax",
            "softmax", "matmul",
            "linear", "pool", "index", "max", "var", "mean", "sum", "pad", "cat", "shape", "mask",
            "exp", "log", "tanh", "sigmoid", "relu", "gelu", "mse", "robust", "pow", "div", "mul",
            "broadcast", "unary", "add")


@dataclass(frozen=True)
class Style:
    """Choices that are all right where they run; `safe` is tried when the first fails (a
    `.view` of a gradient that is not contiguous, say)."""

    safe: bool = False


class Deriver:
    """The backward pass of `target = expr`."""

    def __init__(self, target: str, expr: ast.expr, fact: Callable[[ast.AST], Fact],
                 namer: Namer, taken: set[str], style: Style = Style()):
        self.target, self.expr, self.fact, self.namer = target, expr, fact, namer
        self.taken = set(taken)
        self.style = style
        self.out = LineBackward(target)

    def run(self, up: Up) -> LineBackward:
        self.back(self.expr, up)
        # the most telling idea first: a matrix product's rule says more than the sum around it
        rank = {IDEAS[k]: i for i, k in enumerate(PRIORITY)}
        self.out.ideas.sort(key=lambda idea: rank.get(idea, len(rank)))
        return self.out

    # -- bookkeeping ---------------------------------------------------------------------------
    def idea(self, key: str) -> None:
        if IDEAS[key] not in self.out.ideas:
            self.out.ideas.append(IDEAS[key])

    def temp(self, hint: str, value: ast.expr) -> ast.Name:
        base = gradient(hint)
        name, k = base, 2
        while name in self.taken:
            name, k = f"{base}{k}", k + 1
        self.taken.add(name)
        self.out.prelude.append(f"{name} = {ast.unparse(value)}")
        return _name(name)

    def hint(self, node: ast.AST) -> str:
        """`<line>_<what the node does>`: the temporary `dpreatt_mm` holds the gradient at the
        matrix product inside the line that makes `preatt`."""
        if isinstance(node, ast.Call):
            f = node.func
            what = f.attr if isinstance(f, ast.Attribute) else ast.unparse(f)
        elif isinstance(node, ast.BinOp):
            what = _OP_WORDS.get(type(node.op), "op")
        elif isinstance(node, ast.Subscript):
            what = "pick"
        elif isinstance(node, ast.Name):
            what = node.id
        else:
            what = "part"
        return f"{self.target}_{what}"

    def shared(self, up: Up, node: ast.AST, users: int) -> Up:
        """The arriving gradient bound to a name first, when several operands read it and it is
        more than a name."""
        if users > 1 and not _simple(up.expr):
            return Up(self.temp(self.hint(node), up.expr), up.shape, up.held)
        return up

    def shape(self, node: ast.AST) -> tuple[int, ...]:
        f = self.fact(node)
        return f.shape if f.shape is not None else ()

    def held(self, node: ast.AST) -> tuple[int, ...]:
        f = self.fact(node)
        return f.held if f.held is not None else ()

    @property
    def reshaping(self) -> str:
        """`view`, as learners write it, or `reshape` where a gradient may not be contiguous."""
        return "reshape" if self.style.safe else "view"

    def value(self, node: ast.AST | None) -> object:
        return None if node is None else self.fact(node).value

    def wants(self, node: ast.AST | None) -> bool:
        return node is not None and self.fact(node).grad

    def itself(self, node: ast.expr) -> ast.expr:
        """The node's value as written: the line's output by name where the node is the whole
        line (`counts` for `norm_logits.exp()`)."""
        return _name(self.target) if node is self.expr else copy.deepcopy(node)

    def size(self, node: ast.AST, d: int) -> ast.expr:
        """The size of dim `d` of a node, as the learner would write it."""
        s, h = self.shape(node), self.held(node)
        named = self.namer(s[d], h[d])
        if named is not None:
            return named
        return ast.Subscript(ast.Attribute(copy.deepcopy(node), "shape", ast.Load()),
                             ast.Constant(d), ast.Load())

    def count(self, node: ast.AST, dims: list[int]) -> ast.expr:
        s, h = self.shape(node), self.held(node)
        main, held = math.prod(s[d] for d in dims), math.prod(h[d] for d in dims)
        named = self.namer(main, held)
        if named is not None:
            return named
        parts = [self.size(node, d) for d in dims]
        out = parts[0]
        for p in parts[1:]:
            out = ast.BinOp(out, ast.Mult(), p)
        return out

    # -- shapes of the arriving gradient -------------------------------------------------------
    def reduced(self, up: Up, shape: tuple[int, ...], held: tuple[int, ...],
                who: str | None = None) -> Up:
        """`up` summed over what a broadcast to it added: the leading dimensions, and those that
        are 1 in `shape`."""
        def plan(g: tuple[int, ...], s: tuple[int, ...]) -> tuple[list[int], int]:
            lead = max(0, len(g) - len(s))
            keep = [i for i in range(lead, len(g)) if s[i - lead] == 1 and g[i] != 1]
            return keep, lead

        keep, lead = plan(up.shape, shape)
        if (keep, lead) != plan(up.held, held):
            raise Unsupported("a broadcast that differs between batch sizes")
        expr = up.expr
        if expr is None or (not keep and not lead):
            return up
        if keep:
            expr = _method(expr, "sum", _dims(keep), keepdim=ast.Constant(True))
        if lead:
            expr = _method(expr, "sum", _dims(list(range(lead))))
        if who is not None:
            self.out.sums.setdefault(who, []).extend(keep + list(range(lead)))
        self.idea("broadcast")

        def after(g: tuple[int, ...]) -> tuple[int, ...]:
            return tuple(1 if i in keep else g[i] for i in range(len(g)))[lead:]
        return Up(expr, after(up.shape), after(up.held))

    def fitted(self, up: Up, node: ast.AST) -> Up:
        return self.reduced(up, self.shape(node), self.held(node))

    def full(self, up: Up, node: ast.AST) -> Up:
        """`up` as a tensor of the node's own shape (some rules need every entry)."""
        up = self.fitted(up, node)
        s = self.shape(node)
        if up.shape == s and up.expr is not None:
            return up
        sizes = [self.size(node, d) for d in range(len(s))]
        if up.expr is None:
            if isinstance(node, ast.Name):
                return Up(_call("torch.ones_like", copy.deepcopy(node)), s, self.held(node))
            return Up(_call("torch.ones", *sizes), s, self.held(node))
        if isinstance(node, ast.Name):
            expr = mul(_call("torch.ones_like", copy.deepcopy(node)), up.expr)
        elif not up.shape:  # a number (a scalar's gradient) has no `expand`: ones of the shape
            expr = mul(_call("torch.ones_like", self.local(node)), up.expr)
        else:
            expr = _method(up.expr, "expand", *sizes)
        return Up(expr, s, self.held(node))

    # -- where gradients land ------------------------------------------------------------------
    def give(self, node: ast.Name, up: Up) -> None:
        up = self.reduced(up, self.shape(node), self.held(node), node.id)
        if up.shape != self.shape(node) or up.expr is None:
            up = self.full(up, node)
        self.out.parts.setdefault(node.id, []).append(Part(expr=up.expr))

    def scatter(self, base: ast.expr, index: ast.expr, value: Up, unique: bool,
                rows: ast.expr | None = None, rest: tuple[ast.expr, ...] = ()) -> None:
        """Gradient landing on entries of `base`: a name's, or a temporary's sent on down."""
        value_expr = value.expr if value.expr is not None else ast.Constant(1)
        item = Scatter(copy.deepcopy(index), value_expr, unique, rows, rest)
        if isinstance(base, ast.Name):
            if self.wants(base):
                self.out.parts.setdefault(base.id, []).append(Part(scatter=item))
            return
        zeros = self.temp(self.hint(base), _call("torch.zeros_like", copy.deepcopy(base)))
        self.out.prelude.append(scatter_statement(zeros.id, item, first=True))
        self.back(base, Up(zeros, self.shape(base), self.held(base)))

    # -- the rules -----------------------------------------------------------------------------
    def back(self, node: ast.expr, up: Up) -> None:
        if not self.wants(node):
            return
        if isinstance(node, ast.Name):
            self.give(node, up)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            self.idea("add")
            self.back(node.operand, Up(neg(up.expr), up.shape, up.held))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd):
            self.back(node.operand, up)
        elif isinstance(node, ast.BinOp):
            self.binop(node, self.fitted(up, node))
        elif isinstance(node, ast.Call):
            self.call(node, self.fitted(up, node))
        elif isinstance(node, ast.Attribute):
            self.attribute(node, self.fitted(up, node))
        elif isinstance(node, ast.Subscript):
            self.subscript(node, self.fitted(up, node))
        else:
            raise Unsupported(f"`{ast.unparse(node)}`")

    def times(self, up: Up, *nodes: ast.AST) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The shapes (main, fresh batch) of the arriving gradient times factors made of
        `nodes`: what broadcasting gives, no more (a sum may still be needed)."""
        shape, held = up.shape, up.held
        for n in nodes:
            shape, held = broadcast(shape, self.shape(n)), broadcast(held, self.held(n))
        return shape, held

    def binop(self, node: ast.BinOp, up: Up) -> None:
        left, right = node.left, node.right
        up = self.shared(up, node, self.wants(left) + self.wants(right))
        op = node.op
        if isinstance(op, (ast.Add, ast.Sub)):
            self.idea("add")
            self.back(left, up)
            if self.wants(right):
                self.back(right, up if isinstance(op, ast.Add) else
                          Up(neg(up.expr), up.shape, up.held))
        elif isinstance(op, ast.Mult):
            self.idea("mul")
            if ast.dump(left) == ast.dump(right) and self.wants(left):
                # `x * x` is a square: one term, `2 * x`, as a person writes it
                self.back(left, Up(mul(mul(_num(2), self.local(left)), up.expr),
                                   *self.times(up, left)))
                return
            if self.wants(left):
                self.back(left, Up(mul(self.local(right), up.expr), *self.times(up, right)))
            if self.wants(right):
                self.back(right, Up(mul(self.local(left), up.expr), *self.times(up, left)))
        elif isinstance(op, ast.Div):
            self.idea("div")
            if self.wants(left):
                self.back(left, Up(div(up.expr, self.local(right)), *self.times(up, right)))
            if self.wants(right):
                denominator = ast.BinOp(self.local(right), ast.Pow(), ast.Constant(2))
                self.back(right, Up(mul(ast.BinOp(neg(self.local(left)), ast.Div(),
                                                  denominator), up.expr),
                                    *self.times(up, left, right)))
        elif isinstance(op, ast.Pow):
            self.power(node, left, right, up)
        elif isinstance(op, ast.MatMult):
            self.matmul(left, right, self.full(up, node))
        else:
            raise Unsupported(f"the operator in `{ast.unparse(node)}`")

    def local(self, node: ast.expr) -> ast.expr:
        return copy.deepcopy(node)

    def power(self, node: ast.BinOp | ast.Call, base: ast.expr, exponent: ast.expr,
              up: Up) -> None:
        self.idea("pow")
        if self.wants(base):
            p = self.value(exponent)
            if isinstance(p, (int, float)) and not isinstance(p, bool) \
                    and _const_value(exponent) is not None:
                lower = p - 1
                if lower == 0:
                    local = _num(p)
                elif lower == 1:
                    local = mul(_num(p), self.local(base))
                else:
                    local = mul(_num(p), ast.BinOp(self.local(base), ast.Pow(), _num(lower)))
            else:
                local = mul(self.local(exponent), ast.BinOp(
                    self.local(base), ast.Pow(),
                    ast.BinOp(self.local(exponent), ast.Sub(), ast.Constant(1))))
            self.back(base, Up(mul(local, up.expr), *self.times(up, base, exponent)))
        if self.wants(exponent):
            log = (_call("math.log", self.local(base)) if self.fact(base).shape is None
                   else _call("torch.log", self.local(base)))
            self.back(exponent, Up(mul(mul(self.itself(node), log), up.expr),
                                   *self.times(up, node)))

    def matmul(self, a: ast.expr, b: ast.expr, up: Up) -> None:
        self.idea("matmul")
        up = self.shared(up, a, self.wants(a) + self.wants(b))
        g = up.expr
        sa, sb = self.shape(a), self.shape(b)
        ha, hb = self.held(a), self.held(b)
        if len(sa) < 1 or len(sb) < 1:
            raise Unsupported("a matrix product of a scalar")
        if len(sa) == 1 and len(sb) == 1:
            self.back(a, Up(mul(g, self.local(b)), sa, ha))
            self.back(b, Up(mul(g, self.local(a)), sb, hb))
            return
        if len(sa) == 1:  # [K] @ [K, N]
            if len(sb) != 2:
                raise Unsupported("a vector times a batch of matrices")
            self.back(a, Up(ast.BinOp(self.local(b), ast.MatMult(), g), sa, ha))
            self.back(b, Up(_call("torch.outer", self.local(a), g), sb, hb))
            return
        if len(sb) == 1:  # [.., M, K] @ [K]
            self.back(a, Up(mul(_method(g, "unsqueeze", _num(-1)), self.local(b)), sa, ha))
            if self.wants(b):
                flat = self.local(a) if len(sa) == 2 else _method(
                    self.local(a), "reshape", _num(-1), self.size(b, 0))
                rows = g if len(sa) == 2 else _method(g, "reshape", _num(-1))
                self.back(b, Up(ast.BinOp(self.transposed(flat, 2), ast.MatMult(), rows),
                                sb, hb))
            return
        rank = len(up.shape)
        if self.wants(a):
            peeled = _peel_transpose(a)
            if peeled is not None and self.wants(peeled):
                # a = X.T: dX = (dC @ B.T).T = B @ dC.T, without the double transpose
                value = ast.BinOp(self.local(b), ast.MatMult(), self.transposed(g, rank))
                self.back(peeled, Up(value, *_mm_shapes(sb, hb, _swap(up.shape),
                                                        _swap(up.held))))
            else:
                value = ast.BinOp(g, ast.MatMult(), self.transposed(self.local(b), len(sb)))
                self.back(a, Up(value, *_mm_shapes(up.shape, up.held, _swap(sb), _swap(hb))))
        if self.wants(b):
            peeled = _peel_transpose(b)
            if peeled is not None and self.wants(peeled):
                # b = X.T: dX = (A.T @ dC).T = dC.T @ A
                value = ast.BinOp(self.transposed(g, rank), ast.MatMult(), self.local(a))
                self.back(peeled, Up(value, *_mm_shapes(_swap(up.shape), _swap(up.held),
                                                        sa, ha)))
            elif len(sb) == 2 and len(sa) > 2:
                # a batch of rows against one matrix: flatten the batch, one product
                rows_a = _method(self.local(a), "reshape", _num(-1), self.size(b, 0))
                rows_g = _method(g, "reshape", _num(-1), self.size(b, 1))
                value = ast.BinOp(ast.Attribute(rows_a, "T", ast.Load()), ast.MatMult(),
                                  rows_g)
                self.back(b, Up(value, sb, hb))
            else:
                value = ast.BinOp(self.transposed(self.local(a), len(sa)), ast.MatMult(), g)
                self.back(b, Up(value, *_mm_shapes(_swap(sa), _swap(ha), up.shape, up.held)))

    def transposed(self, node: ast.expr, rank: int) -> ast.expr:
        peeled = _peel_transpose(node)
        if peeled is not None:
            return peeled
        if rank == 2:
            return ast.Attribute(node, "T", ast.Load())
        return _method(node, "transpose", _num(-2), _num(-1))

    def attribute(self, node: ast.Attribute, up: Up) -> None:
        x = node.value
        if node.attr in ("T", "mT"):
            self.idea("shape")
            up = self.full(up, node)
            self.back(x, Up(ast.Attribute(up.expr, node.attr, ast.Load()), self.shape(x),
                            self.held(x)))
        elif node.attr == "values" and isinstance(x, ast.Call):
            self.call(x, up, picked=True)
        else:
            raise Unsupported(f"the attribute `.{node.attr}`")

    def subscript(self, node: ast.Subscript, up: Up) -> None:
        x = node.value
        if isinstance(x, ast.Call) and _const_value(node.slice) == 0 \
                and isinstance(x.func, ast.Attribute) and x.func.attr in ("max", "min"):
            self.call(x, up, picked=True)
            return
        self.idea("index")
        elements = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        advanced = [e for e in elements if self.advanced(e)]
        value = up if up.expr is not None else Up(ast.Constant(1), (), ())
        if not advanced:
            self.scatter(x, node.slice, value, unique=True)
            return
        ranged = any(isinstance(e, ast.Call) and ast.unparse(e.func) in ("range", "torch.arange")
                     for e in advanced)
        if len(elements) == 1:
            index = elements[0]
            f = self.fact(index)
            if f.shape is not None and len(self.shape(x)) >= 1:
                if ranged:
                    self.scatter(x, node.slice, value, unique=True)
                    return
                # rows picked from a table, some more than once: add each back where it came from
                full = self.full(up, node)
                rest = tuple(self.size(x, d) for d in range(1, len(self.shape(x))))
                rows = _method(copy.deepcopy(index), self.reshaping, _num(-1))
                self.scatter(x, node.slice, Up(_method(full.expr, self.reshaping, _num(-1), *rest),
                                               full.shape, full.held),
                             unique=False, rows=rows, rest=rest)
                return
        if ranged and len(advanced) == len(elements):
            self.scatter(x, node.slice, value, unique=True)
            return
        if len(advanced) == len(elements):
            self.scatter(x, node.slice, self.full(up, node), unique=False)
            return
        raise Unsupported(f"the indexing in `{ast.unparse(node)}`")

    def advanced(self, e: ast.expr) -> bool:
        if isinstance(e, (ast.Slice, ast.Constant)):
            return False
        f = self.fact(e)
        if isinstance(e, ast.Call) and ast.unparse(e.func) == "range":
            return True
        if f.shape is not None:
            return True  # a tensor of indices (or a mask)
        return isinstance(f.value, (list, tuple, range))

    # -- calls ---------------------------------------------------------------------------------
    def function(self, node: ast.Call) -> tuple[str, list[ast.expr], dict[str, ast.expr]]:
        """A call as (function, positional arguments with the tensor a method is called on
        first, keywords)."""
        f = node.func
        if isinstance(f, ast.Attribute):
            module = ast.unparse(f.value)
            if module in _MODULES:
                return f.attr, list(node.args), {k.arg: k.value for k in node.keywords if k.arg}
            return f.attr, [f.value, *node.args], {k.arg: k.value for k in node.keywords
                                                    if k.arg}
        raise Unsupported(f"the call `{ast.unparse(node)}`")

    def bind(self, name: str, args: list[ast.expr], kw: dict[str, ast.expr]
             ) -> dict[str, ast.expr | list[ast.expr]]:
        params = _SIGNATURES.get(name)
        if params is None:
            raise Unsupported(f"`{name}`")
        bound: dict[str, ast.expr | list[ast.expr]] = {}
        for i, p in enumerate(params):
            if p.startswith("*"):
                bound[p[1:]] = list(args[i:])
                break
            if i < len(args):
                bound[p] = args[i]
        for k, v in kw.items():
            key = {"axis": "dim", "exponent": "exponent", "keepdims": "keepdim"}.get(k, k)
            if key not in params and f"*{key}" not in params and name not in ("to",):
                if key in ("dims", "shape", "size"):
                    bound["rest"] = [v]
                    continue
                raise Unsupported(f"`{name}(..., {k}=...)`")
            bound[key] = v
        return bound

    def arg(self, bound: dict, key: str) -> object:
        node = bound.get(key)
        if node is None:
            return _DEFAULTS.get(key)
        if isinstance(node, list):
            return [self.value(n) for n in node]
        return self.value(node)

    def call(self, node: ast.Call, up: Up, picked: bool = False) -> None:
        name, args, kw = self.function(node)
        bound = self.bind(name, args, kw)
        x = bound.get("input")
        rule = getattr(self, f"rule_{name}", None)
        if rule is None:
            rule = _RULES.get(name)
            if rule is None:
                raise Unsupported(f"`{name}`")
            rule = getattr(self, rule)
        rule(node, x, bound, up, picked) if name in ("max", "min") else rule(node, x, bound, up)

    # element-wise functions of one input: local derivative times the arriving gradient
    def elementwise(self, node: ast.Call, x: ast.expr, up: Up, local: ast.expr,
                    idea: str) -> None:
        self.idea(idea)
        self.back(x, Up(mul(local, up.expr), *self.times(up, node)))

    def rule_exp(self, node, x, bound, up):
        self.elementwise(node, x, up, self.itself(node), "exp")

    def rule_log(self, node, x, bound, up):
        self.idea("log")
        self.back(x, Up(div(up.expr, self.local(x)), self.shape(node), self.held(node)))

    def rule_tanh(self, node, x, bound, up):
        out = self.itself(node)
        local = ast.BinOp(ast.Constant(1), ast.Sub(),
                          ast.BinOp(out, ast.Pow(), ast.Constant(2)))
        self.elementwise(node, x, up, local, "tanh")

    def rule_sigmoid(self, node, x, bound, up):
        out = self.itself(node)
        local = ast.BinOp(out, ast.Mult(), ast.BinOp(ast.Constant(1), ast.Sub(),
                                                      copy.deepcopy(out)))
        self.elementwise(node, x, up, local, "sigmoid")

    def rule_relu(self, node, x, bound, up):
        mask = _method(ast.Compare(self.itself(node), [ast.Gt()], [ast.Constant(0)]), "float")
        self.elementwise(node, x, up, mask, "relu")

    def rule_leaky_relu(self, node, x, bound, up):
        slope = bound.get("negative_slope") or ast.Constant(0.01)
        local = _call("torch.where", ast.Compare(self.local(x), [ast.Gt()], [ast.Constant(0)]),
                      ast.Constant(1.0), copy.deepcopy(slope))
        self.elementwise(node, x, up, local, "relu")

    def rule_gelu(self, node, x, bound, up):
        approximate = self.arg(bound, "approximate")
        xs = self.local(x)
        if not _simple(xs):
            xs = self.stat(f"{self.target}_in", xs)  # the input itself, named once
        if approximate == "tanh":
            t = _parse(f"torch.tanh(math.sqrt(2 / math.pi) * ({ast.unparse(xs)} + 0.044715 * "
                       f"{ast.unparse(xs)} ** 3))")
            local = _parse(f"0.5 * (1 + {ast.unparse(t)}) + 0.5 * {ast.unparse(xs)} * "
                           f"(1 - {ast.unparse(t)} ** 2) * math.sqrt(2 / math.pi) * "
                           f"(1 + 3 * 0.044715 * {ast.unparse(xs)} ** 2)")
        elif approximate == "none":
            local = _parse(f"0.5 * (1 + torch.erf({ast.unparse(xs)} / math.sqrt(2))) + "
                           f"{ast.unparse(xs)} * torch.exp(-0.5 * {ast.unparse(xs)} ** 2) / "
                           "math.sqrt(2 * math.pi)")
        else:
            raise Unsupported(f"gelu with approximate={approximate!r}")
        self.elementwise(node, x, up, local, "gelu")

    def rule_sqrt(self, node, x, bound, up):
        self.idea("pow")
        local = ast.BinOp(ast.Constant(2), ast.Mult(), self.itself(node))
        self.back(x, Up(div(up.expr, local), self.shape(node), self.held(node)))

    def rule_rsqrt(self, node, x, bound, up):
        local = mul(_num(-0.5), ast.BinOp(self.itself(node), ast.Pow(), ast.Constant(3)))
        self.elementwise(node, x, up, local, "pow")

    def rule_abs(self, node, x, bound, up):
        self.elementwise(node, x, up, _method(self.local(x), "sign"), "unary")

    def rule_sin(self, node, x, bound, up):
        self.elementwise(node, x, up, _method(self.local(x), "cos"), "unary")

    def rule_cos(self, node, x, bound, up):
        self.elementwise(node, x, up, neg(_method(self.local(x), "sin")), "unary")

    def rule_square(self, node, x, bound, up):
        self.elementwise(node, x, up, mul(ast.Constant(2), self.local(x)), "pow")

    def rule_neg(self, node, x, bound, up):
        self.idea("add")
        self.back(x, Up(neg(up.expr), up.shape, up.held))

    rule_negative = rule_neg

    def rule_reciprocal(self, node, x, bound, up):
        local = neg(ast.BinOp(self.itself(node), ast.Pow(), ast.Constant(2)))
        self.elementwise(node, x, up, local, "pow")

    def rule_log1p(self, node, x, bound, up):
        self.idea("log")
        self.back(x, Up(div(up.expr, ast.BinOp(ast.Constant(1), ast.Add(), self.local(x))),
                        self.shape(node), self.held(node)))

    def rule_expm1(self, node, x, bound, up):
        local = ast.BinOp(self.itself(node), ast.Add(), ast.Constant(1))
        self.elementwise(node, x, up, local, "exp")

    def rule_silu(self, node, x, bound, up):
        xs = self.local(x)
        if not _simple(xs):
            xs = self.stat(f"{self.target}_in", xs)  # the input itself, named once
        s = self.stat(f"{self.target}_sig", _call("torch.sigmoid", xs))  # read twice below
        local = _parse(f"{ast.unparse(s)} * (1 + {ast.unparse(xs)} * (1 - {ast.unparse(s)}))")
        self.elementwise(node, x, up, local, "unary")

    def rule_softplus(self, node, x, bound, up):
        if len(node.args) > 1 or node.keywords:
            raise Unsupported("softplus with beta or threshold")
        self.elementwise(node, x, up, _call("torch.sigmoid", self.local(x)), "unary")

    def rule_clamp(self, node, x, bound, up):
        low, high = bound.get("min"), bound.get("max")
        tests = []
        if low is not None and self.value(low) is not None:
            tests.append(ast.Compare(self.local(x), [ast.GtE()], [copy.deepcopy(low)]))
        if high is not None and self.value(high) is not None:
            tests.append(ast.Compare(self.local(x), [ast.LtE()], [copy.deepcopy(high)]))
        if not tests:
            self.back(x, up)
            return
        mask = tests[0] if len(tests) == 1 else ast.BinOp(tests[0], ast.BitAnd(), tests[1])
        self.elementwise(node, x, up, _method(mask, "float"), "relu")

    rule_clip = rule_clamp

    def rule_pow(self, node, x, bound, up):
        exponent = bound.get("exponent")
        if not isinstance(exponent, ast.expr):
            raise Unsupported("pow without an exponent")
        self.power(node, x, exponent, up)  # type: ignore[arg-type]

    def rule_identity(self, node, x, bound, up):
        self.back(x, up)

    # reductions
    def reduced_dims(self, x: ast.expr, bound: dict) -> list[int] | None:
        dim = self.arg(bound, "dim")
        rank = len(self.shape(x))
        if dim is None:
            return None
        dims = list(dim) if isinstance(dim, (list, tuple)) else [dim]
        if not all(isinstance(d, int) for d in dims):
            raise Unsupported("a reduction over dims that are not numbers")
        return sorted(_norm(d, rank) for d in dims)

    def kept(self, up: Up, x: ast.expr, dims: list[int] | None, keepdim: bool) -> Up:
        """The arriving gradient with the reduced dimensions back, as size 1."""
        s, h = self.shape(x), self.held(x)
        if dims is None:
            return Up(up.expr, (), ())
        shape = tuple(1 if d in dims else s[d] for d in range(len(s)))
        held = tuple(1 if d in dims else h[d] for d in range(len(h)))
        expr = up.expr
        if not up.shape:  # a number, the gradient of a scalar: it broadcasts as it is
            return Up(expr, (), ())
        if not keepdim and expr is not None:
            for d in dims:
                expr = _method(expr, "unsqueeze", ast.Constant(d))
        return Up(expr, shape, held)

    def rule_sum(self, node, x, bound, up):
        self.idea("sum")
        dims = self.reduced_dims(x, bound)
        self.back(x, self.kept(up, x, dims, bool(self.arg(bound, "keepdim"))))

    rule_nansum = rule_sum

    def rule_mean(self, node, x, bound, up):
        self.idea("mean")
        dims = self.reduced_dims(x, bound)
        count = self.count(x, dims if dims is not None else list(range(len(self.shape(x)))))
        kept = self.kept(up, x, dims, bool(self.arg(bound, "keepdim")))
        self.back(x, Up(div(kept.expr, count), kept.shape, kept.held))

    def rule_max(self, node, x, bound, up, picked=False):
        self.idea("max")
        name = self.function(node)[0]
        if isinstance(bound.get("dim"), ast.expr) and self.fact(bound["dim"]).shape is not None:
            raise Unsupported(f"`torch.{name}` of two tensors")
        dims = self.reduced_dims(x, bound)
        if dims is None:
            out = self.itself(node)
            mask = _method(ast.Compare(self.local(x), [ast.Eq()], [out]), "float")
            local = ast.BinOp(mask, ast.Div(), _method(copy.deepcopy(mask), "sum"))
            self.back(x, Up(mul(local, up.expr), self.shape(x), self.held(x)))
            return
        if name in ("max", "min") and not picked:
            raise Unsupported(f"`{name}(dim)` without `.values`")
        (d,) = dims
        keepdim = bool(self.arg(bound, "keepdim"))
        kept = self.kept(up, x, dims, keepdim)
        g = kept.expr if kept.expr is not None else ast.Constant(1)
        s = self.shape(x)
        if name in ("amax", "amin"):
            out = self.itself(node)
            if not keepdim:
                out = _method(out, "unsqueeze", ast.Constant(d))
            mask = _method(ast.Compare(self.local(x), [ast.Eq()], [out]), "float")
            total = _method(copy.deepcopy(mask), "sum", ast.Constant(d),
                            keepdim=ast.Constant(True))
            local = ast.BinOp(mask, ast.Div(), total)
        elif d == len(s) - 1:
            where = ast.Attribute(_method(self.local(x), name, ast.Constant(d)), "indices",
                                  ast.Load())
            local = _call("F.one_hot", where, self.size(x, d))
        else:
            where = _method(self.local(x), "arg" + name, ast.Constant(d),
                            keepdim=ast.Constant(True))
            self.back(x, Up(_method(_call("torch.zeros_like", self.local(x)), "scatter",
                                    ast.Constant(d), where, g), s, self.held(x)))
            return
        self.back(x, Up(mul(local, g), s, self.held(x)))

    rule_min = rule_max
    rule_amax = rule_max
    rule_amin = rule_max

    def rule_logsumexp(self, node, x, bound, up):
        self.idea("softmax")
        dims = self.reduced_dims(x, bound)
        if dims is None or len(dims) != 1:
            raise Unsupported("logsumexp over several dims")
        kept = self.kept(up, x, dims, bool(self.arg(bound, "keepdim")))
        local = _call("F.softmax", self.local(x), ast.Constant(dims[0]))
        self.back(x, Up(mul(local, kept.expr), self.shape(x), self.held(x)))

    def rule_var(self, node, x, bound, up):
        self.idea("var")
        dims = self.reduced_dims(x, bound)
        all_dims = dims if dims is not None else list(range(len(self.shape(x))))
        correction = 1 if self.arg(bound, "unbiased") else 0
        if bound.get("correction") is not None:
            correction = self.arg(bound, "correction")
            if not isinstance(correction, int):
                raise Unsupported("a correction that is not a whole number")
        count = self.count(x, all_dims)
        if correction:
            count = ast.BinOp(count, ast.Sub(), ast.Constant(correction))
        keep = {"keepdim": ast.Constant(True)}
        mean = (_method(self.local(x), "mean", _dims(all_dims), **keep) if dims is not None
                else _method(self.local(x), "mean"))
        centred = ast.BinOp(self.local(x), ast.Sub(), mean)
        kept = self.kept(up, x, dims, bool(self.arg(bound, "keepdim")))
        local = ast.BinOp(mul(ast.Constant(2), centred), ast.Div(), count)
        if self.function(node)[0] == "std":
            out = self.local(node)
            if dims is not None and not self.arg(bound, "keepdim"):
                for d in dims:
                    out = _method(out, "unsqueeze", ast.Constant(d))
            local = ast.BinOp(local, ast.Div(), ast.BinOp(ast.Constant(2), ast.Mult(), out))
        self.back(x, Up(mul(local, kept.expr), self.shape(x), self.held(x)))

    rule_std = rule_var

    def rule_softmax(self, node, x, bound, up):
        self.idea("softmax")
        d = self.arg(bound, "dim")
        if not isinstance(d, int):
            raise Unsupported("softmax without a dim")
        up = self.full(up, node)
        out = self.itself(node)
        if not _simple(up.expr):
            up = Up(self.temp(self.target, up.expr), up.shape, up.held)
        inner = _method(ast.BinOp(out, ast.Mult(), up.expr), "sum", ast.Constant(d),
                        keepdim=ast.Constant(True))
        value = ast.BinOp(copy.deepcopy(out), ast.Mult(),
                          ast.BinOp(copy.deepcopy(up.expr), ast.Sub(), inner))
        self.back(x, Up(value, self.shape(x), self.held(x)))

    def rule_log_softmax(self, node, x, bound, up):
        self.idea("log_softmax")
        d = self.arg(bound, "dim")
        if not isinstance(d, int):
            raise Unsupported("log_softmax without a dim")
        up = self.full(up, node)
        if not _simple(up.expr):
            up = Up(self.temp(self.target, up.expr), up.shape, up.held)
        total = _method(copy.deepcopy(up.expr), "sum", ast.Constant(d), keepdim=ast.Constant(True))
        value = ast.BinOp(up.expr, ast.Sub(),
                          ast.BinOp(_method(self.itself(node), "exp"), ast.Mult(), total))
        self.back(x, Up(value, self.shape(x), self.held(x)))

    # shapes
    def rule_view(self, node, x, bound, up):
        self.idea("shape")
        up = self.full(up, node)
        how = self.reshaping
        if isinstance(x, ast.Name):
            value = _method(up.expr, how, ast.Attribute(copy.deepcopy(x), "shape", ast.Load()))
        else:
            value = _method(up.expr, how, *[self.size(x, d) for d in range(len(self.shape(x)))])
        self.back(x, Up(value, self.shape(x), self.held(x)))

    rule_reshape = rule_view
    rule_view_as = rule_view
    rule_reshape_as = rule_view
    rule_flatten = rule_view
    rule_unflatten = rule_view

    def rule_squeeze(self, node, x, bound, up):
        if bound.get("dim") is None:
            self.rule_view(node, x, bound, up)
            return
        self.idea("shape")
        up = self.full(up, node)
        self.back(x, Up(_method(up.expr, "unsqueeze", copy.deepcopy(bound["dim"])),
                        self.shape(x), self.held(x)))

    def rule_unsqueeze(self, node, x, bound, up):
        self.idea("shape")
        up = self.full(up, node)
        self.back(x, Up(_method(up.expr, "squeeze", copy.deepcopy(bound["dim"])),
                        self.shape(x), self.held(x)))

    def rule_transpose(self, node, x, bound, up):
        self.idea("shape")
        up = self.full(up, node)
        self.back(x, Up(_method(up.expr, "transpose", copy.deepcopy(bound["dim0"]),
                                copy.deepcopy(bound["dim1"])), self.shape(x), self.held(x)))

    rule_swapaxes = rule_transpose
    rule_swapdims = rule_transpose

    def rule_t(self, node, x, bound, up):
        self.idea("shape")
        up = self.full(up, node)
        self.back(x, Up(ast.Attribute(up.expr, "T", ast.Load()), self.shape(x), self.held(x)))

    def rule_permute(self, node, x, bound, up):
        self.idea("shape")
        dims = self.arg(bound, "rest")
        if isinstance(dims, list) and len(dims) == 1 and isinstance(dims[0], (list, tuple)):
            dims = list(dims[0])
        rank = len(self.shape(x))
        if not isinstance(dims, list) or sorted(_norm(d, rank) for d in dims) != list(range(rank)):
            raise Unsupported("a permute whose dims are not numbers")
        inverse = [0] * rank
        for i, d in enumerate(dims):
            inverse[_norm(d, rank)] = i
        up = self.full(up, node)
        self.back(x, Up(_method(up.expr, "permute", *[ast.Constant(i) for i in inverse]),
                        self.shape(x), self.held(x)))

    def rule_expand(self, node, x, bound, up):
        self.idea("broadcast")
        self.back(x, self.reduced(up, self.shape(x), self.held(x)))

    rule_expand_as = rule_expand
    rule_broadcast_to = rule_expand

    def rule_flip(self, node, x, bound, up):
        self.idea("shape")
        dims = bound.get("rest") or []
        up = self.full(up, node)
        self.back(x, Up(_method(up.expr, "flip", *[copy.deepcopy(d) for d in dims]),
                        self.shape(x), self.held(x)))

    def rule_to(self, node, x, bound, up):
        if not self.fact(x).grad:
            return
        self.back(x, up)

    def rule_tril(self, node, x, bound, up):
        self.idea("mask")
        name = self.function(node)[0]
        up = self.full(up, node)
        args = [copy.deepcopy(bound["diagonal"])] if bound.get("diagonal") is not None else []
        self.back(x, Up(_method(up.expr, name, *args), self.shape(x), self.held(x)))

    rule_triu = rule_tril

    def rule_masked_fill(self, node, x, bound, up):
        self.idea("mask")
        up = self.full(up, node)
        self.back(x, Up(_method(up.expr, "masked_fill", copy.deepcopy(bound["mask"]),
                                ast.Constant(0)), self.shape(x), self.held(x)))

    def rule_where(self, node, x, bound, up):
        self.idea("mask")
        cond = bound["condition"]
        up = self.shared(up, node, self.wants(bound.get("input")) + self.wants(bound.get("other")))
        g = up.expr if up.expr is not None else ast.Constant(1.0)
        shape, held = self.shape(node), self.held(node)
        if self.wants(bound.get("input")):
            self.back(bound["input"], Up(_call("torch.where", copy.deepcopy(cond), g,
                                               ast.Constant(0.0)), shape, held))
        if self.wants(bound.get("other")):
            self.back(bound["other"], Up(_call("torch.where", copy.deepcopy(cond),
                                               ast.Constant(0.0), copy.deepcopy(g)),
                                         shape, held))

    def rule_cat(self, node, x, bound, up):
        self.idea("cat")
        tensors = bound.get("tensors")
        if not isinstance(tensors, (ast.List, ast.Tuple)):
            raise Unsupported("a concatenation of a list that is not written out")
        d = self.arg(bound, "dim") or 0
        rank = len(self.shape(node))
        d = _norm(int(d), rank)
        up = self.full(up, node)
        stacking = self.function(node)[0] == "stack"
        if not stacking and sum(self.wants(t) for t in tensors.elts) > 1 \
                and not _simple(up.expr):
            up = Up(self.temp(self.hint(node), up.expr), up.shape, up.held)
        start: ast.expr = ast.Constant(0)
        for i, piece in enumerate(tensors.elts):
            if stacking:
                index = [ast.Slice() for _ in range(d)] + [ast.Constant(i)]
                nxt = start
            else:
                size = self.size(piece, d)
                nxt = _added(start, size)
                index = [ast.Slice() for _ in range(d)] + [
                    ast.Slice(None if _const_value(start) == 0 else start,
                              None if i == len(tensors.elts) - 1 else nxt)]
            if self.wants(piece):
                sliced = ast.Subscript(copy.deepcopy(up.expr),
                                       index[0] if len(index) == 1 else ast.Tuple(index,
                                                                                  ast.Load()),
                                       ast.Load())
                self.back(piece, Up(sliced, self.shape(piece), self.held(piece)))
            start = nxt

    rule_concat = rule_cat
    rule_stack = rule_cat

    def rule_matmul(self, node, x, bound, up):
        self.matmul(bound["input"], bound["other"], self.full(up, node))

    rule_mm = rule_matmul
    rule_bmm = rule_matmul

    # the layers of torch.nn.functional
    def rule_cross_entropy(self, node, x, bound, up):
        self.idea("cross_entropy")
        for unusual in ("weight", "size_average", "reduce"):
            if bound.get(unusual) is not None:
                raise Unsupported(f"cross_entropy with {unusual}")
        if self.arg(bound, "label_smoothing") or self.arg(bound, "ignore_index") != -100:
            raise Unsupported("cross_entropy with label_smoothing or ignore_index")
        s = self.shape(x)
        if len(s) != 2:
            raise Unsupported("cross_entropy of logits that are not [N, C]")
        target = bound["target"]
        onehot = _call("F.one_hot", copy.deepcopy(target), self.size(x, 1))
        if self.function(node)[0] == "nll_loss":
            local: ast.expr = neg(onehot)
        else:
            local = ast.BinOp(_call("F.softmax", self.local(x), ast.Constant(1)), ast.Sub(),
                              onehot)
        reduction = self.arg(bound, "reduction")
        if reduction == "mean":
            value = mul(div(local, self.size(x, 0)), up.expr)
        elif reduction == "sum":
            value = mul(local, up.expr)
        elif reduction == "none":
            g = up.expr if up.expr is not None else ast.Constant(1)
            value = mul(local, _method(g, "unsqueeze", ast.Constant(1)))
        else:
            raise Unsupported(f"cross_entropy with reduction={reduction!r}")
        self.back(x, Up(value, s, self.held(x)))

    rule_nll_loss = rule_cross_entropy

    def rule_gather(self, node, x, bound, up):
        """`x.gather(dim, index)` picks one entry per index: its gradient is scattered back,
        adding up where an entry was picked twice."""
        self.idea("index")
        if self.arg(bound, "sparse_grad"):
            raise Unsupported("gather with sparse_grad")
        up = self.full(up, node)
        value = _method(_call("torch.zeros_like", self.local(x)), "scatter_add",
                        copy.deepcopy(bound["dim"]), copy.deepcopy(bound["index"]), up.expr)
        self.back(x, Up(value, self.shape(x), self.held(x)))

    def rule_index_select(self, node, x, bound, up):
        """`x.index_select(dim, index)` copies whole slices: each goes back where it came from,
        adding up where one was taken twice."""
        self.idea("index")
        up = self.full(up, node)
        value = _method(_call("torch.zeros_like", self.local(x)), "index_add",
                        copy.deepcopy(bound["dim"]), copy.deepcopy(bound["index"]), up.expr)
        self.back(x, Up(value, self.shape(x), self.held(x)))

    def rule_logsigmoid(self, node, x, bound, up):
        self.elementwise(node, x, up, _call("torch.sigmoid", neg(self.local(x))), "sigmoid")

    def rule_binary_cross_entropy_with_logits(self, node, x, bound, up):
        self.idea("bce")
        for unusual in ("weight", "size_average", "reduce", "pos_weight"):
            if bound.get(unusual) is not None:
                raise Unsupported(f"binary_cross_entropy_with_logits with {unusual}")
        local = ast.BinOp(_call("torch.sigmoid", self.local(x)), ast.Sub(),
                          copy.deepcopy(bound["target"]))
        reduction = self.arg(bound, "reduction")
        if reduction == "mean":
            value = mul(div(local, _method(self.local(x), "numel")), up.expr)
        elif reduction == "sum":
            value = mul(local, up.expr)
        elif reduction == "none":
            value = mul(local, self.full(up, node).expr)
        else:
            raise Unsupported(f"binary_cross_entropy_with_logits with reduction={reduction!r}")
        self.back(x, Up(value, self.shape(x), self.held(x)))

    def rule_normalize(self, node, x, bound, up):
        """`F.normalize(x, dim=d)` is `x / |x|` along `d`: the direct path, less what moves
        the length, `y * (y * dy).sum(d)`, all over the length."""
        self.idea("normalize")
        if self.arg(bound, "p") != 2:
            raise Unsupported("normalize with p other than 2")
        dim = bound.get("dim") or ast.Constant(1)
        up = self.full(up, node)
        norm = self.stat("norm", _method(_method(self.local(x), "norm", dim=copy.deepcopy(dim),
                                                 keepdim=ast.Constant(True)), "clamp_min",
                                         copy.deepcopy(bound.get("eps") or ast.Constant(1e-12))))
        y = self.itself(node)
        along = _method(mul(copy.deepcopy(y), up.expr), "sum", dim=copy.deepcopy(dim),
                        keepdim=ast.Constant(True))
        value = ast.BinOp(ast.BinOp(up.expr, ast.Sub(), mul(copy.deepcopy(y), along)),
                          ast.Div(), norm)
        self.back(x, Up(value, self.shape(x), self.held(x)))

    def rule_cosine_similarity(self, node, x, bound, up):
        """`F.cosine_similarity(a, b, dim)` is `(a * b).sum(dim) / (|a| |b|)`: for `a`, the other
        vector over both lengths, less the similarity times `a` over its length squared."""
        self.idea("normalize")
        a, b = bound["input"], bound["other"]
        dim = bound.get("dim") or ast.Constant(1)
        up = self.full(up, node)
        g = _method(up.expr, "unsqueeze", copy.deepcopy(dim))
        sim = _method(self.itself(node), "unsqueeze", copy.deepcopy(dim))
        norms = {}
        for side in (a, b):
            norms[id(side)] = self.stat("norm", _method(self.local(side), "norm",
                                                        dim=copy.deepcopy(dim),
                                                        keepdim=ast.Constant(True)))
        for this, that in ((a, b), (b, a)):
            if not self.wants(this):
                continue
            mine, theirs = norms[id(this)], norms[id(that)]
            local = ast.BinOp(
                ast.BinOp(self.local(that), ast.Div(), ast.BinOp(copy.deepcopy(mine), ast.Mult(),
                                                                 copy.deepcopy(theirs))),
                ast.Sub(),
                mul(copy.deepcopy(sim), ast.BinOp(self.local(this), ast.Div(), ast.BinOp(
                    copy.deepcopy(mine), ast.Pow(), ast.Constant(2)))))
            self.back(this, Up(mul(copy.deepcopy(g), local), self.shape(this), self.held(this)))

    def rule_einsum(self, node, x, bound, up):
        """`torch.einsum('ij,jk->ik', a, b)`: each operand's gradient is the einsum of the
        arriving gradient with the other operands, its own indices as the output; only where
        every index of the operand appears in the output or another operand, once each."""
        self.idea("einsum")
        equation = self.value(bound["equation"])
        operands = bound.get("operands") or []
        if not isinstance(equation, str) or "->" not in equation or "..." in equation:
            raise Unsupported("einsum without an explicit `->` (or with `...`)")
        inputs, out = equation.replace(" ", "").split("->")
        parts = inputs.split(",")
        if len(parts) != len(operands):
            raise Unsupported("einsum whose operands do not match its equation")
        up = self.full(up, node)
        for i, operand in enumerate(operands):
            if not self.wants(operand):
                continue
            others = [p for k, p in enumerate(parts) if k != i]
            mine = parts[i]
            if len(set(mine)) != len(mine) or not set(mine) <= set(out + "".join(others)):
                raise Unsupported(f"einsum `{equation}` (an index of one operand alone)")
            spec = ",".join([out, *others]) + "->" + mine
            args = [ast.Constant(spec), up.expr,
                    *(copy.deepcopy(o) for k, o in enumerate(operands) if k != i)]
            self.back(operand, Up(_call("torch.einsum", *args), self.shape(operand),
                                  self.held(operand)))

    def rule_mse_loss(self, node, x, bound, up):
        self.idea("mse")
        if self.arg(bound, "reduction") != "mean":
            raise Unsupported("mse_loss without the mean")
        a, b = bound["input"], bound["target"]
        shape = self.shape(a)
        diff = ast.BinOp(self.local(a), ast.Sub(), self.local(b))
        value = mul(div(mul(ast.Constant(2), diff), self.count(a, list(range(len(shape))))),
                    up.expr)
        if self.wants(a):
            self.back(a, Up(value, shape, self.held(a)))
        if self.wants(b):
            self.back(b, Up(neg(copy.deepcopy(value)), shape, self.held(b)))

    def rule_l1_loss(self, node, x, bound, up):
        self.robust(node, bound, up, lambda d: _call("torch.sign", d))

    def rule_smooth_l1_loss(self, node, x, bound, up):
        beta = bound.get("beta") or ast.Constant(1.0)
        self.robust(node, bound, up, lambda d: _method(
            ast.BinOp(d, ast.Div(), copy.deepcopy(beta)), "clamp", ast.Constant(-1),
            ast.Constant(1)))

    def rule_huber_loss(self, node, x, bound, up):
        delta = bound.get("delta") or ast.Constant(1.0)
        self.robust(node, bound, up, lambda d: _method(
            d, "clamp", neg(copy.deepcopy(delta)), copy.deepcopy(delta)))

    def robust(self, node, bound, up, slope: Callable[[ast.expr], ast.expr]) -> None:
        """A loss of the difference `a - b`, entry by entry, then averaged (or summed): its
        slope at each difference over the count, to `a`, and negated to `b`."""
        self.idea("robust")
        reduction = self.arg(bound, "reduction")
        if reduction not in ("mean", "sum") or bound.get("size_average") is not None \
                or bound.get("reduce") is not None:
            raise Unsupported(f"{self.function(node)[0]} with reduction={reduction!r}")
        a, b = bound["input"], bound["target"]
        shape = self.shape(a)
        local = slope(ast.BinOp(self.local(a), ast.Sub(), self.local(b)))
        if reduction == "mean":
            local = div(local, self.count(a, list(range(len(shape)))))
        value = mul(local, up.expr)
        if self.wants(a):
            self.back(a, Up(value, shape, self.held(a)))
        if self.wants(b):
            self.back(b, Up(neg(copy.deepcopy(value)), shape, self.held(b)))

    def rule_linear(self, node, x, bound, up):
        self.idea("linear")
        w, b = bound.get("weight"), bound.get("bias")
        up = self.full(up, node)
        up = self.shared(up, node, self.wants(x) + self.wants(w) + self.wants(b))
        g = up.expr
        sx = self.shape(x)
        if self.wants(x):
            self.back(x, Up(ast.BinOp(g, ast.MatMult(), self.local(w)), sx, self.held(x)))
        if self.wants(w):
            if len(sx) == 2:
                value = ast.BinOp(ast.Attribute(copy.deepcopy(g), "T", ast.Load()),
                                  ast.MatMult(), self.local(x))
            else:
                rows_g = _method(copy.deepcopy(g), "reshape", _num(-1), self.size(w, 0))
                rows_x = _method(self.local(x), "reshape", _num(-1), self.size(w, 1))
                value = ast.BinOp(ast.Attribute(rows_g, "T", ast.Load()), ast.MatMult(), rows_x)
            self.back(w, Up(value, self.shape(w), self.held(w)))
        if b is not None and self.wants(b):
            self.back(b, Up(copy.deepcopy(g), up.shape, up.held))

    def rule_layer_norm(self, node, x, bound, up):
        self.idea("layer_norm")
        normalized = self.arg(bound, "normalized_shape")
        if not (isinstance(normalized, (list, tuple)) and len(normalized) == 1):
            raise Unsupported("layer_norm over more than the last dim")
        w, b = bound.get("weight"), bound.get("bias")
        eps = bound.get("eps") or ast.Constant(1e-5)
        up = self.full(up, node)
        t = self.target
        keep = {"keepdim": ast.Constant(True)}
        mean = self.stat(f"{t}_mean", _method(self.local(x), "mean", _num(-1), **keep))
        var = _method(self.local(x), "var", _num(-1), **keep, unbiased=ast.Constant(False))
        rstd = self.stat(f"{t}_rstd", ast.BinOp(ast.BinOp(var, ast.Add(), copy.deepcopy(eps)),
                                                ast.Pow(), _num(-0.5)))
        hat = self.stat(f"{t}_hat", ast.BinOp(ast.BinOp(self.local(x), ast.Sub(), mean),
                                              ast.Mult(), rstd))
        if not _simple(up.expr):
            up = Up(self.temp(t, up.expr), up.shape, up.held)
        g = up.expr
        if self.wants(x):
            dhat = g if w is None else self.temp(f"{t}_hat", ast.BinOp(
                copy.deepcopy(g), ast.Mult(), self.local(w)))
            inner = _parse(f"{ast.unparse(dhat)} - {ast.unparse(dhat)}.mean(-1, keepdim=True) - "
                           f"{hat.id} * ({ast.unparse(dhat)} * {hat.id}).mean(-1, keepdim=True)")
            self.back(x, Up(ast.BinOp(copy.deepcopy(rstd), ast.Mult(), inner), self.shape(x),
                            self.held(x)))
        if w is not None and self.wants(w):
            self.back(w, Up(ast.BinOp(copy.deepcopy(g), ast.Mult(), copy.deepcopy(hat)),
                            up.shape, up.held))
        if b is not None and self.wants(b):
            self.back(b, Up(copy.deepcopy(g), up.shape, up.held))

    def stat(self, name: str, value: ast.expr) -> ast.Name:
        """A forward statistic the backward pass needs again (layernorm's mean, rstd, xhat),
        recomputed under a name of its own."""
        base, k = name, 2
        while name in self.taken:
            name, k = f"{base}{k}", k + 1
        self.taken.add(name)
        self.out.prelude.append(f"{name} = {ast.unparse(value)}")
        return _name(name)

    def rule_embedding(self, node, x, bound, up):
        self.idea("index")
        idx, w = bound["input"], bound["weight"]
        if bound.get("padding_idx") is not None or bound.get("max_norm") is not None:
            raise Unsupported("embedding with padding_idx or max_norm")
        up = self.full(up, node)
        rest = tuple(self.size(w, d) for d in range(1, len(self.shape(w))))
        rows = _method(copy.deepcopy(idx), self.reshaping, _num(-1))
        if isinstance(w, ast.Name) and self.wants(w):
            self.scatter(w, copy.deepcopy(idx), Up(_method(up.expr, self.reshaping, _num(-1),
                                                           *rest),
                                                   up.shape, up.held),
                         unique=False, rows=rows, rest=rest)
        elif self.wants(w):
            raise Unsupported("an embedding of a table that is not a name")

    def conv_settings(self, bound: dict, dims: int) -> tuple[list[int], list[int], list[int]]:
        def each(key: str, default: int) -> list[int]:
            v = self.arg(bound, key)
            v = default if v is None else v
            if isinstance(v, str):
                raise Unsupported(f"{key}={v!r}")
            v = list(v) if isinstance(v, (list, tuple)) else [v] * dims
            if not all(isinstance(i, int) for i in v):
                raise Unsupported(f"a {key} that is not a number")
            return v
        if self.arg(bound, "groups") not in (1, None):
            raise Unsupported("a grouped convolution")
        return each("stride", 1), each("padding", 0), each("dilation", 1)

    def rule_conv1d(self, node, x, bound, up):
        self.conv(node, x, bound, up, 1)

    def rule_conv2d(self, node, x, bound, up):
        self.conv(node, x, bound, up, 2)

    def conv(self, node, x, bound, up, dims: int) -> None:
        self.idea("conv")
        w, b = bound["weight"], bound.get("bias")
        stride, padding, dilation = self.conv_settings(bound, dims)
        up = self.full(up, node)
        up = self.shared(up, node, self.wants(x) + self.wants(w) + self.wants(b))
        g = up.expr
        kernel = self.shape(w)[2:]
        fn = f"F.conv{dims}d"
        if self.wants(x):
            reach = [d * (k - 1) - p for d, k, p in zip(dilation, kernel, padding, strict=True)]
            flipped = _method(_method(self.local(w), "transpose", ast.Constant(0),
                                      ast.Constant(1)), "flip",
                              *[ast.Constant(2 + i) for i in range(dims)])
            if all(s == 1 for s in stride) and all(r >= 0 for r in reach):
                kw = {}
                if any(reach):
                    kw["padding"] = _tuple_or_one(reach)
                if any(d != 1 for d in dilation):
                    kw["dilation"] = _tuple_or_one(dilation)
                value = _call(fn, copy.deepcopy(g), flipped, **kw)
            else:
                extra = []
                for i in range(dims):
                    length_in, length_out = self.shape(x)[2 + i], self.shape(node)[2 + i]
                    made = (length_out - 1) * stride[i] - 2 * padding[i] \
                        + dilation[i] * (kernel[i] - 1) + 1
                    extra.append(length_in - made)
                kw = {"stride": _tuple_or_one(stride), "padding": _tuple_or_one(padding),
                      "dilation": _tuple_or_one(dilation)}
                if any(extra):
                    kw["output_padding"] = _tuple_or_one(extra)
                value = _call(f"F.conv_transpose{dims}d", copy.deepcopy(g), self.local(w), **kw)
            self.back(x, Up(value, self.shape(x), self.held(x)))
        if self.wants(w):
            if dims == 1:
                padded: ast.expr = self.local(x)
                if padding[0]:
                    padded = _call("F.pad", padded, ast.Tuple([ast.Constant(padding[0])] * 2,
                                                              ast.Load()))
                span = dilation[0] * (kernel[0] - 1) + 1
                windows = _method(padded, "unfold", ast.Constant(2), ast.Constant(span),
                                  ast.Constant(stride[0]))
                if dilation[0] != 1:
                    windows = ast.Subscript(windows, ast.Tuple([ast.Constant(...), ast.Slice(
                        None, None, ast.Constant(dilation[0]))], ast.Load()), ast.Load())
                value = _call("torch.einsum", ast.Constant("bot,bitk->oik"), copy.deepcopy(g),
                              windows)
            else:
                cols = _call("F.unfold", self.local(x), _tuple_or_one(kernel),
                             dilation=_tuple_or_one(dilation), padding=_tuple_or_one(padding),
                             stride=_tuple_or_one(stride))
                value = _method(_call("torch.einsum", ast.Constant("bol,bkl->ok"),
                                      _method(copy.deepcopy(g), "flatten", ast.Constant(2)),
                                      cols), "view",
                                ast.Attribute(self.local(w), "shape", ast.Load()))
            self.back(w, Up(value, self.shape(w), self.held(w)))
        if b is not None and self.wants(b):
            self.back(b, Up(_method(copy.deepcopy(g), "sum", _dims([0] + [2 + i for i in
                                                                        range(dims)])),
                            self.shape(b), self.held(b)))

    def rule_max_pool1d(self, node, x, bound, up):
        self.pool(node, x, bound, up, 1)

    def rule_max_pool2d(self, node, x, bound, up):
        self.pool(node, x, bound, up, 2)

    def pool(self, node, x, bound, up, dims: int) -> None:
        self.idea("pool")
        if self.arg(bound, "return_indices") or self.arg(bound, "ceil_mode"):
            raise Unsupported("max pooling with return_indices or ceil_mode")
        up = self.full(up, node)
        call = copy.deepcopy(node)
        call.keywords = [k for k in call.keywords if k.arg != "return_indices"] + [
            ast.keyword("return_indices", ast.Constant(True))]
        where = ast.Subscript(call, ast.Constant(1), ast.Load())
        k, stride = self.arg(bound, "kernel_size"), self.arg(bound, "stride")
        if self.arg(bound, "padding") in (0, None) and stride in (None, k) \
                and self.arg(bound, "dilation") in (1, None):
            # Windows that do not overlap: each max's gradient goes back to where it was, as
            # the textbook has it (the indices of the maxima, then an unpool).
            at = self.stat("argmax", where)
            size = ast.Subscript(ast.Attribute(self.local(x), "shape", ast.Load()),
                                 ast.Slice(ast.UnaryOp(ast.USub(), ast.Constant(dims)), None),
                                 ast.Load())
            value = _call(f"F.max_unpool{dims}d", up.expr, at,
                          copy.deepcopy(bound["kernel_size"]), output_size=size)
            self.back(x, Up(value, self.shape(x), self.held(x)))
            return
        value = _method(_method(_method(_call("torch.zeros_like", self.local(x)), "flatten",
                                        ast.Constant(2)), "scatter_add", ast.Constant(2),
                                _method(where, "flatten", ast.Constant(2)),
                                _method(up.expr, "flatten", ast.Constant(2))),
                        "view_as", self.local(x))
        self.back(x, Up(value, self.shape(x), self.held(x)))

    def rule_pad(self, node, x, bound, up):
        self.idea("pad")
        if self.arg(bound, "mode") != "constant":
            raise Unsupported("padding that is not constant")
        pads = self.arg(bound, "pad")
        if not isinstance(pads, (list, tuple)) or not all(isinstance(p, int) and p >= 0
                                                          for p in pads):
            raise Unsupported("padding by negative or unknown amounts")
        up = self.full(up, node)
        value = _padded_conv(up.expr, pads) or ast.Subscript(
            up.expr, _pad_index(self.shape(x), pads), ast.Load())
        self.back(x, Up(value, self.shape(x), self.held(x)))


def _padded_conv(expr: ast.expr | None, pads: list[int]) -> ast.expr | None:
    """A convolution's input gradient through a padding, written at once: the gradient of a
    causal `F.conv1d(F.pad(x, (4, 0)), w, dilation=4)` is the arriving gradient padded on the
    other side, `F.conv1d(F.pad(g, (0, 4)), w.transpose(0, 1).flip(2), dilation=4)`, rather
    than a wider convolution cut down again."""
    if not (isinstance(expr, ast.Call) and ast.unparse(expr.func) == "F.conv1d"
            and len(pads) == 2 and len(expr.args) == 2):
        return None
    kw = {k.arg: k.value for k in expr.keywords}
    q = _const_value(kw.get("padding"))
    if not isinstance(q, int) or set(kw) - {"padding", "dilation"}:
        return None
    left, right = q - pads[0], q - pads[1]
    if left < 0 or right < 0:
        return None
    g = expr.args[0]
    if left or right:
        g = _call("F.pad", g, ast.Tuple([ast.Constant(left), ast.Constant(right)], ast.Load()))
    return ast.Call(expr.func, [g, expr.args[1]],
                    [k for k in expr.keywords if k.arg != "padding"])


def _pad_index(shape: tuple[int, ...], pads: list[int]) -> ast.expr:
    """`[..., 2:]` for a pad of (2, 0) on the last dim: the padding cut off."""
    rank = len(shape)
    touched = len(pads) // 2
    index: list[ast.expr] = []
    for d in range(rank - touched, rank):
        k = rank - 1 - d
        left, right = pads[2 * k], pads[2 * k + 1]
        index.append(ast.Slice(ast.Constant(left) if left else None,
                               _num(-right) if right else None))
    if touched < rank:
        index.insert(0, ast.Constant(...))
    return index[0] if len(index) == 1 else ast.Tuple(index, ast.Load())


def _swap(shape: tuple[int, ...]) -> tuple[int, ...]:
    return shape[:-2] + (shape[-1], shape[-2])


def _mm_shapes(a: tuple[int, ...], ha: tuple[int, ...], b: tuple[int, ...],
               hb: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The shapes of `A @ B` for matrices (or batches of them), on both batches."""
    def one(x: tuple[int, ...], y: tuple[int, ...]) -> tuple[int, ...]:
        return broadcast(x[:-2], y[:-2]) + (x[-2], y[-1])
    return one(a, b), one(ha, hb)


def _added(a: ast.expr, b: ast.expr) -> ast.expr:
    x, y = _const_value(a), _const_value(b)
    if x is not None and y is not None:
        return _num(x + y)
    if x == 0:
        return b
    return ast.BinOp(a, ast.Add(), b)


def _tuple_or_one(values: list[int]) -> ast.expr:
    if len(set(values)) == 1:
        return ast.Constant(values[0])
    return ast.Tuple([ast.Constant(v) for v in values], ast.Load())


_OP_WORDS = {ast.Add: "sum", ast.Sub: "diff", ast.Mult: "prod", ast.Div: "quot",
             ast.Pow: "pow", ast.MatMult: "mm"}

_RULES = {"contiguous": "rule_identity", "clone": "rule_identity", "float": "rule_identity",
          "double": "rule_identity", "type_as": "rule_identity"}


def scatter_statement(name: str, item: Scatter, first: bool) -> str:
    """`dx[index] = value` and its accumulating forms, for the gradient `name`."""
    value = ast.unparse(item.value)
    if item.rows is not None:
        return f"{name}.index_add_(0, {ast.unparse(item.rows)}, {value})"
    index = ast.unparse(item.index)
    if index.startswith("(") and index.endswith(")") and isinstance(item.index, ast.Tuple):
        index = index[1:-1]
    if item.unique:
        return f"{name}[{index}] {'=' if first else '+='} {value}"
    parts = item.index.elts if isinstance(item.index, ast.Tuple) else [item.index]
    tensors = ", ".join(
        ast.unparse(_call("torch.arange", *p.args)) if isinstance(p, ast.Call)
        and ast.unparse(p.func) == "range" else ast.unparse(p) for p in parts)
    return f"{name}.index_put_(({tensors},), {value}, accumulate=True)"


def derive(target: str, expr: ast.expr, fact: Callable[[ast.AST], Fact], namer: Namer,
           taken: set[str], style: Style = Style()) -> LineBackward:
    """The backward pass of `target = expr`, its output's gradient arriving as `d<target>` (or
    as 1 where the line is the loss: `fact(expr).shape == ()` and `loss`)."""
    f = fact(expr)
    if f.shape is None:
        raise Unsupported(f"`{target}` is not a tensor")
    return Deriver(target, expr, fact, namer, taken, style).run(
        Up(_name(gradient(target)), f.shape, f.held or f.shape))


def derive_loss(target: str, expr: ast.expr, fact: Callable[[ast.AST], Fact], namer: Namer,
                taken: set[str], style: Style = Style()) -> LineBackward:
    """The loss line's backward pass: its own gradient is 1, which nothing multiplies."""
    return Deriver(target, expr, fact, namer, taken, style).run(Up(None, (), ()))
