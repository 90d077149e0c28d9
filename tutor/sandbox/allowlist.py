"""What learner code may reach through `torch`, `F` and a tensor: an allow list, by name.

A backward pass needs tensors: making them, elementwise math, reductions, indexing, shape
operations and a little linear algebra. Everything else torch offers (files, storages, TorchScript,
global settings, the random state, the C++ re-exports) is left out, and the most likely of those
are named in `REASONS` so that a refusal says why instead of "not found". The lists are generous on
purpose: refusing ordinary code is a worse failure than not offering an exotic function.
"""

from __future__ import annotations


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# -- torch.<name> ---------------------------------------------------------------------------------
_CREATION = _words("""
    tensor as_tensor asarray scalar_tensor zeros ones full zeros_like ones_like full_like empty
    empty_like empty_strided arange range linspace logspace eye tril_indices triu_indices
    rand rand_like randn randn_like randint randint_like randperm normal bernoulli multinomial
    poisson complex polar meshgrid cartesian_prod combinations vander block_diag diag diagflat
    diag_embed Generator
""")
_ELEMENTWISE = _words("""
    abs absolute acos acosh arccos arccosh asin asinh arcsin arcsinh atan atanh arctan arctanh
    atan2 arctan2 add sub subtract rsub mul multiply div divide true_divide floor_divide fmod
    remainder neg negative positive reciprocal pow float_power square sqrt rsqrt exp exp2 expm1
    log log2 log10 log1p logaddexp logaddexp2 sigmoid logit tanh sin cos tan sinh cosh sinc
    relu hardshrink threshold celu selu prelu rrelu erf erfc erfinv lgamma digamma polygamma
    mvlgamma igamma igammac i0 xlogy clamp clamp_min clamp_max clip sign sgn signbit copysign
    heaviside floor ceil round trunc fix frac hypot lerp addcmul addcdiv nan_to_num maximum
    minimum fmax fmin where lcm gcd ldexp frexp nextafter deg2rad rad2deg angle real imag conj
    conj_physical resolve_conj resolve_neg
    eq ne not_equal lt le gt ge less less_equal greater greater_equal isclose allclose equal
    isfinite isinf isnan isneginf isposinf isreal is_nonzero logical_and logical_or logical_not
    logical_xor bitwise_and bitwise_or bitwise_not bitwise_xor bitwise_left_shift
    bitwise_right_shift
""")
_REDUCTIONS = _words("""
    sum nansum mean nanmean prod max min amax amin aminmax argmax argmin all any std var
    std_mean var_mean median nanmedian mode quantile nanquantile logsumexp norm dist cumsum
    cumprod cummax cummin logcumsumexp count_nonzero bincount histc sort argsort msort topk
    kthvalue unique unique_consecutive softmax log_softmax trace diff cov corrcoef
""")
_INDEXING = _words("""
    gather scatter scatter_add scatter_reduce index_select index_add index_copy index_fill
    index_put index_put_ index_reduce masked_fill masked_select masked_scatter take
    take_along_dim nonzero argwhere searchsorted bucketize isin one_hot embedding
    select_scatter slice_scatter diagonal_scatter
""")
_SHAPES = _words("""
    reshape view_as_real view_as_complex flatten unflatten squeeze unsqueeze transpose swapaxes
    swapdims permute movedim moveaxis t adjoint cat concat concatenate stack hstack vstack dstack
    column_stack row_stack split tensor_split chunk unbind hsplit vsplit dsplit narrow select
    flip fliplr flipud roll rot90 tile repeat_interleave broadcast_to broadcast_tensors
    broadcast_shapes atleast_1d atleast_2d atleast_3d tril triu diagonal ravel clone detach
    numel is_tensor is_floating_point is_complex is_same_size promote_types result_type can_cast
    get_default_dtype Size Tensor finfo iinfo typename
""")
_LINEAR_ALGEBRA = _words("""
    matmul mm bmm mv dot vdot inner outer ger addmm addmv addr addbmm baddbmm einsum tensordot
    kron cross chain_matmul matrix_power matrix_exp det logdet slogdet inverse pinverse
    cholesky qr svd lstsq
""")
_DTYPES = _words("""
    dtype device layout float float16 float32 float64 half double bfloat16 int int8 int16 int32
    int64 long short uint8 bool complex64 complex128 cfloat cdouble
""")
_CONSTANTS = _words("e pi inf nan newaxis")
# The fused recurrent layers a lesson's setup runs; a notebook that copies the setup runs them too.
_RECURRENT = _words("lstm gru rnn_tanh rnn_relu lstm_cell gru_cell rnn_tanh_cell rnn_relu_cell")
# no_grad only narrows what autograd records; learners wrap training code in it. (inference_mode
# is left out: its state cannot be put back from outside once code leaves it held.)
_CONTEXTS = _words("no_grad")

TORCH = (
    _CREATION | _ELEMENTWISE | _REDUCTIONS | _INDEXING | _SHAPES | _LINEAR_ALGEBRA | _DTYPES
    | _CONSTANTS | _CONTEXTS | _RECURRENT
)

# Uninitialised memory may still hold numbers an earlier computation freed (autograd's among
# them), so every way of getting it is answered with zeros instead.
UNINITIALISED = _words("empty empty_like empty_strided new_empty new_empty_strided")

# -- torch.nn.functional, torch.linalg, torch.special, torch.fft -------------------------------
FUNCTIONAL = _words("""
    linear bilinear relu relu6 leaky_relu elu selu celu gelu silu mish softplus softsign
    softshrink hardshrink tanhshrink hardtanh hardsigmoid hardswish logsigmoid sigmoid tanh
    glu threshold softmax softmin log_softmax gumbel_softmax normalize one_hot embedding pad
    cross_entropy nll_loss mse_loss l1_loss smooth_l1_loss huber_loss kl_div binary_cross_entropy
    binary_cross_entropy_with_logits poisson_nll_loss gaussian_nll_loss cosine_similarity
    pairwise_distance pdist layer_norm batch_norm group_norm instance_norm rms_norm
    local_response_norm dropout conv1d conv2d conv_transpose1d conv_transpose2d avg_pool1d
    avg_pool2d max_pool1d max_pool2d max_unpool1d max_unpool2d adaptive_avg_pool1d
    adaptive_avg_pool2d unfold fold
    scaled_dot_product_attention interpolate
""")
LINALG = _words("""
    matmul vecdot multi_dot norm vector_norm matrix_norm det slogdet inv pinv solve
    solve_triangular cholesky qr svd svdvals eig eigh eigvals eigvalsh lstsq matrix_rank
    matrix_power matrix_exp cross diagonal vander
""")
SPECIAL = _words("""
    expit logit erf erfc erfcx erfinv ndtr ndtri log_ndtr xlogy xlog1py entr sinc round exp2
    expm1 log1p log_softmax softmax logsumexp digamma psi polygamma gammaln multigammaln
    gammainc gammaincc i0 i0e i1 i1e zeta
""")
FFT = _words("""
    fft ifft fft2 ifft2 fftn ifftn rfft irfft rfft2 irfft2 rfftn irfftn hfft ihfft fftfreq
    rfftfreq fftshift ifftshift
""")

MODULES: dict[str, frozenset[str]] = {
    "torch": TORCH | _words("nn linalg special fft"),
    "torch.nn": _words("functional"),
    # `pad_sequence`, which a notebook builds its batches of names with: tensors in, a tensor
    # out. Held under a name of its own (`rnn_utils`): `.utils` stays closed on torch.
    "torch.nn.utils.rnn": _words("pad_sequence"),
    "torch.nn.functional": FUNCTIONAL,
    "torch.linalg": LINALG,
    "torch.special": SPECIAL,
    "torch.fft": FFT,
    "math": _words("""
        pi e tau inf nan sqrt exp log log2 log10 log1p expm1 pow fabs floor ceil trunc
        isclose isfinite isinf isnan prod fsum sin cos tan tanh sinh cosh asin acos atan atan2
        erf erfc gamma lgamma hypot dist comb perm factorial gcd lcm copysign fmod isqrt
    """),
}

# -- attributes of a tensor (and of torch.Tensor itself) --------------------------------------
_TENSOR_ONLY = _words("""
    shape size dim ndim ndimension numel nelement dtype device layout T mT H mH data real imag
    item tolist float double half bfloat16 long int short bool byte char cpu to type_as
    view view_as reshape_as expand expand_as repeat contiguous is_contiguous stride
    storage_offset element_size itemsize nbytes is_floating_point is_complex is_signed
    is_leaf is_cpu is_cuda is_mps is_meta is_sparse is_quantized is_nested
    sum_to_size new_zeros new_ones new_full new_tensor new_empty new_empty_strided
    fill_ zero_ copy_ index_add_ index_copy_ index_fill_ index_put_ index_reduce_ scatter_
    scatter_add_ scatter_reduce_ masked_fill_ masked_scatter_ put_ unfold apply_ map_
    clamp_ clip_ exp_ log_ neg_ abs_ sqrt_ pow_ mul_ div_ add_ sub_ tanh_ sigmoid_ relu_
    squeeze_ unsqueeze_ t_ transpose_ to_dense type fill_diagonal_ nan_to_num_ ne_ eq_
    as_strided
""")
TENSOR = (
    (_ELEMENTWISE | _REDUCTIONS | _INDEXING | _SHAPES | _LINEAR_ALGEBRA | _TENSOR_ONLY)
    - _words("Size Tensor finfo iinfo typename is_tensor promote_types result_type can_cast "
             "get_default_dtype broadcast_shapes broadcast_tensors")
)


def tensor_allows(name: str) -> bool:
    """In-place forms of allowed methods (`add_`, `clamp_`, ...) come with them."""
    return name in TENSOR or (name.endswith("_") and name[:-1] in TENSOR)


# The modules a notebook's `import` may name, and the name each stand-in has in the sandbox's
# namespace (sandbox/modules.py `MODULES`): `from math import sqrt` reads as `sqrt = math.sqrt`.
IMPORTABLE = {"torch": "torch", "torch.nn": "torch.nn", "torch.nn.functional": "F", "math": "math",
              "torch.nn.utils.rnn": "rnn_utils",
              "functools": "functools", "types": "types", "random": "random",
              "collections": "collections", "dataclasses": "dataclasses",
              "itertools": "itertools", "string": "string", "time": "time",
              "hashlib": "hashlib", "zlib": "zlib"}
# What the small stand-ins hold (sandbox/modules.py `_functools`, `_types`, `_random`,
# `_collections`): what a notebook builds its data with.
SMALL_MODULES = {"functools": frozenset({"wraps", "partial", "reduce", "lru_cache", "cache"}),
                 "types": frozenset({"SimpleNamespace"}),
                 "random": frozenset({"seed", "shuffle", "random", "randint", "choice",
                                      "sample", "uniform", "gauss", "randrange", "Random"}),
                 "collections": frozenset({"deque", "Counter", "defaultdict", "OrderedDict",
                                           "namedtuple"}),
                 # records of a layer's weights or activations (sandbox/modules.py)
                 "dataclasses": frozenset({"dataclass", "field", "fields", "asdict",
                                           "replace", "is_dataclass"}),
                 # pure functions over what they are given
                 "itertools": frozenset({"chain", "product", "islice", "count", "repeat",
                                         "cycle", "accumulate", "zip_longest", "pairwise",
                                         "combinations", "permutations", "groupby",
                                         "starmap", "takewhile", "dropwhile", "tee"}),
                 "string": frozenset({"ascii_lowercase", "ascii_uppercase", "ascii_letters",
                                      "digits", "punctuation", "whitespace", "printable"}),
                 # a training loop's timing: the clock only, never a sleep
                 "time": frozenset({"time", "perf_counter", "monotonic", "process_time",
                                    "time_ns", "perf_counter_ns"}),
                 # a notebook's own deterministic shuffle (`sort(key=md5 of the word)`)
                 "hashlib": frozenset({"md5", "sha1", "sha256"}),
                 # or by a word's checksum (`crc32(w.encode()) % 10 < 8` for a split)
                 "zlib": frozenset({"crc32", "adler32"})}


def importable(module: str, name: str) -> bool:
    """Whether `from module import name` finds `name` in the sandbox's stand-in."""
    held = SMALL_MODULES.get(module) or MODULES.get(module) or frozenset()
    return name in held or module == "torch.nn" and name in NN

# What torch.nn offers besides functional: its base class and parameter, as stand-ins
# (sandbox/objects.py `Module`, `parameter`).
NN = frozenset({"Module", "Parameter", "init", "Linear", "Embedding", "LayerNorm", "Tanh",
                "ReLU", "Sigmoid", "GELU", "Softmax", "Identity", "Dropout", "Sequential",
                "ModuleList", "ModuleDict", "ParameterList", "ParameterDict"})

# Underscore names that answer only a string (the guard checks): `type(x).__name__` in a print.
READABLE_DUNDERS = frozenset({"__name__"})

# A class of the learner's may list its attributes (`__slots__ = ('dW', 'db')`) and read the
# list back: names only, none starting with an underscore (sandbox/objects.py checks).
SLOTS = "__slots__"


def slot_names(value: object) -> tuple[str, ...] | None:
    """A `__slots__` value as a tuple of plain attribute names, or None where it is anything
    else (a name of Python's own, a dict, an object that is not a string)."""
    names = (value,) if isinstance(value, str) else value
    if not isinstance(names, (tuple, list)) or not all(
            type(n) is str and n.isidentifier() and not n.startswith("_") for n in names):
        return None
    return tuple(names)

# The double-underscore methods a class of the learner's may define (sandbox/objects.py), and
# call on its base through `super()` (`super().__init__()`).
CLASS_METHODS = frozenset({"__init__", "__call__", "__getitem__", "__setitem__", "__len__",
                           "__iter__", "__contains__", "__repr__", "__str__"})


def private(name: str) -> bool:
    """`_cache`: a name a class of the learner's keeps to itself (one underscore, not Python's
    own double-underscore names), open on the learner's own objects only (the guard checks)."""
    return name.startswith("_") and not name.startswith("__") and len(name) > 1


# -- why the likely others are closed ------------------------------------------------------------
_AUTOGRAD = "the point is to compute the gradient yourself, so autograd's machinery is closed"
_FILES = "the sandbox has no files: nothing is read from or written to disk"
_GLOBAL = ("it changes torch's global settings, which would carry over into later checks; the "
           "tutor keeps them as the lesson needs them")
_STORAGE = "storages and raw memory reach below the tensor; index and reshape the tensor instead"
_UNINITIALISED = ("it gives uninitialised memory; use torch.zeros(sizes), x.new_zeros(sizes) or "
                  "x.new_tensor(data)")
_SCRIPT = "compiling or scripting code is outside what a backward pass needs"

REASONS: dict[str, str] = {
    "grad": "reading .grad would give the answer away",
    "backward": ".backward() would let autograd do the work you are here to do",
    "grad_fn": _AUTOGRAD, "retain_grad": _AUTOGRAD, "retains_grad": _AUTOGRAD,
    "requires_grad": _AUTOGRAD, "requires_grad_": _AUTOGRAD, "register_hook": _AUTOGRAD,
    "register_post_accumulate_grad_hook": _AUTOGRAD, "autograd": _AUTOGRAD,
    "enable_grad": _AUTOGRAD, "set_grad_enabled": _AUTOGRAD, "func": _AUTOGRAD, "vmap": _AUTOGRAD,
    "save": _FILES, "load": _FILES, "from_file": _FILES, "PyTorchFileWriter": _FILES,
    "PyTorchFileReader": _FILES, "hub": "the sandbox has no network", "numpy": _STORAGE,
    "storage": _STORAGE, "untyped_storage": _STORAGE, "data_ptr": _STORAGE,
    "const_data_ptr": _STORAGE, "share_memory_": _STORAGE, "pin_memory": _STORAGE,
    "set_": _STORAGE, "resize_": _STORAGE, "resize_as_": _STORAGE,
    "as_strided_": _STORAGE, "frombuffer": _STORAGE, "from_numpy": _STORAGE,
    "from_dlpack": _STORAGE, "to_dlpack": _STORAGE, "as_subclass": _STORAGE,
    "UntypedStorage": _STORAGE, "TypedStorage": _STORAGE, "Storage": _STORAGE,
    "new": _UNINITIALISED, "empty_permuted": _UNINITIALISED,
    "cdata": _STORAGE, "resize": _STORAGE, "resize_as": _STORAGE, "storage_type": _STORAGE,
    "is_set_to": _STORAGE, "as_strided_scatter": _STORAGE, "is_shared": _STORAGE,
    "is_pinned": _STORAGE, "sparse_resize_": _STORAGE, "sparse_resize_and_clear_": _STORAGE,
    "resize_as_sparse_": _STORAGE, "to_mkldnn": _STORAGE,
    "jit": _SCRIPT, "compile": _SCRIPT, "CompilationUnit": _SCRIPT, "import_ir_module": _SCRIPT,
    "import_ir_module_from_buffer": _SCRIPT, "ScriptModule": _SCRIPT, "fx": _SCRIPT,
    "manual_seed": "reseeding would change the lesson's random state",
    "seed": "reseeding would change the lesson's random state",
    "get_rng_state": "the random state belongs to the lesson",
    "set_rng_state": "the random state belongs to the lesson",
    "default_generator": "the random state belongs to the lesson; make your own "
                         "torch.Generator() if you need one",
    "ops": "torch.ops reaches below the tensor API",
    "library": "torch.library reaches below the tensor API",
    "utils": "torch.utils is outside what this exercise needs",
    "backends": _GLOBAL, "cuda": "the device is chosen by the tutor", "mps": _GLOBAL,
    "distributed": "outside what this exercise needs",
    "multiprocessing": "the sandbox starts no processes",
    "classes": "outside what this exercise needs",
    "format": "format strings can walk into objects' internals; use an f-string instead",
    "format_map": "format strings can walk into objects' internals; use an f-string instead",
    "mro": "introspection is closed in the sandbox",
    "Module": "build the network from tensors, as the lesson does",
    "inference_mode": "your code already runs without autograd; torch.no_grad() is open if you "
                      "want to say so",
}


def reason(name: str) -> str:
    """Why `name` is closed: a specific reason where one is known, else the general rule."""
    if name in REASONS:
        return REASONS[name]
    if name.startswith(("set_", "use_deterministic", "autocast")):
        return _GLOBAL
    if "storage" in name.lower():
        return _STORAGE
    return "it is not among what a backward pass here needs (tensor math, shapes and indexing)"
