"""torch.nn's layers as the sandbox offers them: a learner's model built of `nn.Linear`,
`nn.Embedding` and `nn.LayerNorm` (with a backward pass of their own, the gradients kept as
`.g` notes or in dicts) runs as it would in a kernel.

Each layer is a `Module` of the sandbox's (objects.py) holding plain tensors made by
`nn.Parameter`, and its call is a few torch operations on them, traced like any (a linear layer
is `x @ weight.T + bias`, so a weight kept as (out, in) is read laid out, tutor/core/frame.py).
Their parameters are drawn as torch draws them, from the same global generator, with the same
bounds; nothing of torch's own module machinery (hooks, buffers, state dicts) comes with them.
"""

from __future__ import annotations

import math
import types
from typing import Any

import torch
import torch.nn.functional as F

from tutor.sandbox.guard import Refused, sandbox_class
from tutor.sandbox.objects import Module, parameter


def _uniform(shape: tuple[int, ...], bound: float) -> torch.Tensor:
    return (torch.rand(shape) * 2 - 1) * bound


class Linear(Module):
    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 **_options: Any) -> None:
        bound = 1 / math.sqrt(in_features) if in_features else 0.0
        self.in_features, self.out_features = in_features, out_features
        self.weight = parameter(_uniform((out_features, in_features), bound))
        self.bias = parameter(_uniform((out_features,), bound)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x @ self.weight.T
        return out if self.bias is None else out + self.bias


class Embedding(Module):
    def __init__(self, num_embeddings: int, embedding_dim: int, **_options: Any) -> None:
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.weight = parameter(torch.randn(num_embeddings, embedding_dim))

    def forward(self, index: torch.Tensor) -> torch.Tensor:
        return self.weight[index]


class LayerNorm(Module):
    def __init__(self, normalized_shape: Any, eps: float = 1e-5,
                 elementwise_affine: bool = True, bias: bool = True, **_options: Any) -> None:
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(
            normalized_shape)
        self.normalized_shape, self.eps = shape, eps
        self.weight = parameter(torch.ones(shape)) if elementwise_affine else None
        self.bias = parameter(torch.zeros(shape)) if elementwise_affine and bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


class _Elementwise(Module):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = args, kwargs


class Tanh(_Elementwise):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x)


class ReLU(_Elementwise):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


class Sigmoid(_Elementwise):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x)


class GELU(Module):
    def __init__(self, approximate: str = "none") -> None:
        self.approximate = approximate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x, approximate=self.approximate)


class Softmax(Module):
    def __init__(self, dim: int | None = None) -> None:
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.softmax(x, dim=self.dim)


class Identity(_Elementwise):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class Dropout(Module):
    """Dropout: nothing dropped at `p = 0` or after `.eval()`, as in torch."""

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        self.p, self.training = p, True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        return F.dropout(x, self.p, True)

    def train(self, mode: bool = True) -> Module:
        self.training = mode
        return self

    def eval(self) -> Module:
        return self.train(False)


class ModuleList(Module):
    def __init__(self, modules: Any = ()) -> None:
        self._layers = list(modules)

    def append(self, module: Any) -> ModuleList:
        self._layers.append(module)
        return self

    def __getitem__(self, i: int) -> Any:
        return self._layers[i]

    def __len__(self) -> int:
        return len(self._layers)

    def __iter__(self) -> Any:
        return iter(self._layers)


class Sequential(ModuleList):
    def __init__(self, *layers: Any) -> None:
        self._layers = list(layers)

    def forward(self, x: Any) -> Any:
        for layer in self._layers:
            x = layer(x)
        return x


class ModuleDict(Module):
    def __init__(self, modules: Any = None) -> None:
        self._layers = dict(modules or {})

    def __getitem__(self, key: str) -> Any:
        return self._layers[key]

    def __setitem__(self, key: str, module: Any) -> None:
        self._layers[key] = module

    def __len__(self) -> int:
        return len(self._layers)

    def __iter__(self) -> Any:
        return iter(self._layers)

    def keys(self) -> Any:
        return self._layers.keys()

    def values(self) -> Any:
        return self._layers.values()

    def items(self) -> Any:
        return self._layers.items()

    def __contains__(self, key: object) -> bool:
        return key in self._layers

    def get(self, key: str, default: Any = None) -> Any:
        return self._layers.get(key, default)

    def update(self, modules: Any) -> None:
        self._layers.update(modules)


class ParameterList(ModuleList):
    """Parameters kept in a list; `parameters()` and `named_parameters()` walk into it."""


class ParameterDict(ModuleDict):
    """Parameters kept by name (`pd['E']`); `parameters()` and `named_parameters()` walk
    into it."""


LAYERS = {cls.__name__: cls for cls in (
    Linear, Embedding, LayerNorm, Tanh, ReLU, Sigmoid, GELU, Softmax, Identity, Dropout,
    Sequential, ModuleList, ModuleDict, ParameterList, ParameterDict)}
for _cls in LAYERS.values():
    sandbox_class(_cls)  # built on, and kept attributes of, as the learner's own


def init_module() -> types.ModuleType:
    """`nn.init`: the initialisers a model of the learner's draws its weights with, in place,
    as torch's (they draw from the global generator and write into the tensor given)."""
    module = types.ModuleType("torch.nn.init")
    for name in INIT:
        setattr(module, name, _initialiser(name))
    return module


INIT = frozenset({"normal_", "uniform_", "zeros_", "ones_", "constant_", "xavier_uniform_",
                  "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "trunc_normal_",
                  "orthogonal_", "eye_"})


def _initialiser(name: str) -> Any:
    real = getattr(torch.nn.init, name)

    def init(tensor: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(tensor, torch.Tensor):
            raise Refused(f"nn.init.{name} fills a tensor")
        with torch.no_grad():
            return real(tensor, *args, **kwargs)

    init.__name__ = name
    return init
