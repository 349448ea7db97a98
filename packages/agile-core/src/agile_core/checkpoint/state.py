"""Split nested Python state into named tensors plus a JSON-able skeleton, and back.

``flatten_state`` walks dicts (plain and ``OrderedDict``, keeping a module state dict's
``_metadata``), lists, tuples and ``torch.Size`` holding tensors, numpy arrays and scalars,
ints, floats, bools, ``None``, str, bytes and torch dtypes. Every tensor or array becomes an
entry of the returned tensor dict; everything else is described exactly by the skeleton.
Each skeleton node is a JSON object with a ``"t"`` tag:

* ``none`` / ``bool`` (``v``) / ``str`` (``v``) / ``bytes`` (``hex``) / ``dtype`` (``v``)
* ``int``: ``v`` (a JSON number) or, outside +-2**53, ``s`` (decimal string)
* ``float``: ``v`` (JSON number, shortest repr, exact) or ``s`` for ``nan``/``inf``/``-inf``
* ``npscalar``: ``dtype`` (numpy ``dtype.str``) and ``hex`` (the raw value bytes)
* ``tensor``: ``key``, ``dtype``, ``shape``, ``enc`` (``native`` or ``bytes``) and, for an
  ``nn.Parameter``, ``requires_grad``
* ``ndarray``: ``key``, ``dtype`` (numpy ``dtype.str``), ``shape``, ``enc``
* ``list`` / ``tuple``: ``items``; ``size``: ``v`` (list of ints)
* ``dict`` / ``odict``: ``items`` as ``[key, node]`` pairs (a str key is a bare JSON string,
  any other key a node); ``odict`` may carry ``meta`` (the ``_metadata`` attribute)

Tensor aliasing is not preserved: a tensor reachable twice is stored twice.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from typing import Any, TypeGuard

import numpy as np
import torch

from agile_core.checkpoint.dtypes import NATIVE_CODES, dtype_name, torch_dtype_from_name
from agile_core.checkpoint.errors import CheckpointError

_SAFE_INT = 2**53
_ROOT_KEY = "@root"
_RESERVED_KEYS = frozenset({"__metadata__"})


class _Flattener:
    """Stateful walker producing tensors and skeleton nodes for one object."""

    def __init__(self) -> None:
        self.tensors: dict[str, torch.Tensor] = {}
        self._storages: set[tuple[str, int]] = set()
        self._active: set[int] = set()

    def node(self, obj: Any, path: tuple[str, ...]) -> dict[str, Any]:
        scalar = _scalar_node(obj)
        if scalar is not None:
            return scalar
        if isinstance(obj, torch.Tensor):
            return self._tensor_node(obj, path)
        if isinstance(obj, np.ndarray):
            return self._array_node(obj, path)
        marker = id(obj)
        if marker in self._active:
            raise ValueError(f"cannot flatten a self-referencing structure (at {_show(path)})")
        self._active.add(marker)
        try:
            return self._container_node(obj, path)
        finally:
            self._active.discard(marker)

    def _container_node(self, obj: Any, path: tuple[str, ...]) -> dict[str, Any]:
        kind = type(obj)
        if kind is list or kind is tuple:
            items = [self.node(value, (*path, str(i))) for i, value in enumerate(obj)]
            return {"t": "list" if kind is list else "tuple", "items": items}
        if kind is dict or kind is OrderedDict:
            pairs = [
                [_key_encode(key, path), self.node(value, (*path, str(key)))]
                for key, value in obj.items()
            ]
            node: dict[str, Any] = {"t": "dict" if kind is dict else "odict", "items": pairs}
            meta = getattr(obj, "_metadata", None)
            if kind is OrderedDict and meta is not None:
                node["meta"] = self.node(meta, (*path, "_metadata"))
            return node
        raise TypeError(
            f"cannot store object of type {kind.__module__}.{kind.__qualname__} at {_show(path)}; "
            "supported: dict, OrderedDict, list, tuple, torch.Size, torch.Tensor, numpy arrays "
            "and scalars, int, float, bool, None, str, bytes, torch.dtype"
        )

    def _tensor_node(self, tensor: torch.Tensor, path: tuple[str, ...]) -> dict[str, Any]:
        kind = type(tensor)
        if kind is not torch.Tensor and kind is not torch.nn.Parameter:
            raise TypeError(f"cannot store tensor subclass {kind.__qualname__} at {_show(path)}")
        if tensor.layout != torch.strided or tensor.is_quantized or tensor.is_meta:
            raise TypeError(f"only dense, non-quantized tensors can be stored ({_show(path)})")
        node: dict[str, Any] = {
            "t": "tensor",
            "dtype": dtype_name(tensor.dtype),
            "shape": list(tensor.shape),
        }
        if kind is torch.nn.Parameter:
            node["requires_grad"] = bool(tensor.requires_grad)
        data = tensor.detach().resolve_conj().resolve_neg()
        if data.device.type != "cpu":
            data = data.cpu()
        if tensor.dtype in NATIVE_CODES:
            node["enc"] = "native"
        else:
            data = _as_bytes(data, path)
            node["enc"] = "bytes"
        node["key"] = self._add(data, path)
        return node

    def _array_node(self, array: np.ndarray, path: tuple[str, ...]) -> dict[str, Any]:
        if type(array) is not np.ndarray:
            raise TypeError(
                f"cannot store ndarray subclass {type(array).__qualname__} at {_show(path)}"
            )
        dtype = array.dtype
        if dtype.hasobject or dtype.kind == "V" or dtype.itemsize == 0:
            raise TypeError(f"cannot store numpy array of dtype {dtype} at {_show(path)}")
        node: dict[str, Any] = {"t": "ndarray", "dtype": dtype.str, "shape": list(array.shape)}
        contiguous = array
        if not (array.flags.c_contiguous and array.flags.writeable):
            contiguous = array.copy(order="C")  # torch.from_numpy needs writable C-order memory
        tensor = _native_array_tensor(contiguous)
        if tensor is None:
            raw = contiguous.reshape(-1).view(np.uint8)
            tensor = torch.from_numpy(raw)
            node["enc"] = "bytes"
        else:
            node["enc"] = "native"
        node["key"] = self._add(tensor, path)
        return node

    def _add(self, tensor: torch.Tensor, path: tuple[str, ...]) -> str:
        if not tensor.is_contiguous():
            tensor = tensor.contiguous()
        storage = tensor.untyped_storage()
        if storage.nbytes() > 0:
            marker = (str(tensor.device), storage.data_ptr())
            if marker in self._storages:
                tensor = tensor.clone()  # safetensors refuses tensors that share memory
                marker = (str(tensor.device), tensor.untyped_storage().data_ptr())
            self._storages.add(marker)
        name = "/".join(path) if path else _ROOT_KEY
        base, counter = name, 0
        while name in self.tensors or name in _RESERVED_KEYS:
            counter += 1
            name = f"{base}~{counter}"
        self.tensors[name] = tensor
        return name


def _as_bytes(tensor: torch.Tensor, path: tuple[str, ...]) -> torch.Tensor:
    """View a dense tensor's memory as a flat ``uint8`` tensor."""
    try:
        return tensor.contiguous().reshape(-1).view(torch.uint8)
    except (RuntimeError, TypeError) as exc:
        raise TypeError(
            f"cannot store tensor of dtype {tensor.dtype} at {_show(path)}: {exc}"
        ) from exc


def _native_array_tensor(array: np.ndarray) -> torch.Tensor | None:
    """Wrap an array as a torch tensor of the same dtype, or ``None`` if torch cannot."""
    if not array.dtype.isnative:
        return None
    try:
        tensor = torch.from_numpy(array)
    except TypeError:
        return None
    if tensor.dtype not in NATIVE_CODES:
        return None
    return tensor


def _scalar_node(obj: Any) -> dict[str, Any] | None:
    """Encode a non-container, non-tensor value; ``None`` if ``obj`` is not such a value."""
    kind = type(obj)
    if obj is None:
        return {"t": "none"}
    if kind is bool:
        return {"t": "bool", "v": obj}
    if kind is int:
        return (
            {"t": "int", "v": obj} if -_SAFE_INT < obj < _SAFE_INT else {"t": "int", "s": str(obj)}
        )
    if kind is float:
        return {"t": "float", "v": obj} if math.isfinite(obj) else {"t": "float", "s": repr(obj)}
    if kind is str:
        return {"t": "str", "v": obj}
    if kind is bytes:
        return {"t": "bytes", "hex": obj.hex()}
    if kind is torch.dtype:
        return {"t": "dtype", "v": dtype_name(obj)}
    if kind is torch.Size:
        return {"t": "size", "v": list(obj)}
    if isinstance(obj, np.generic):
        dtype = obj.dtype
        if dtype.hasobject or dtype.kind == "V":
            raise TypeError(f"cannot store numpy scalar of dtype {dtype}")
        return {"t": "npscalar", "dtype": dtype.str, "hex": np.asarray(obj).tobytes().hex()}
    return None


def _key_encode(key: Any, path: tuple[str, ...]) -> Any:
    if type(key) is str:
        return key
    if type(key) is tuple:
        return {"t": "tuple", "items": [_key_encode(part, path) for part in key]}
    node = _scalar_node(key)
    if node is None or node["t"] in ("bytes", "size", "dtype", "npscalar"):
        raise TypeError(
            f"unsupported dict key {key!r} of type {type(key).__qualname__} at {_show(path)}"
        )
    return node


def _show(path: tuple[str, ...]) -> str:
    return "<root>" if not path else "/".join(path)


def flatten_state(obj: Any) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Split ``obj`` into ``(tensors, skeleton)``.

    ``tensors`` maps unique names to dense, contiguous CPU tensors that never share memory
    (ready for ``safetensors``); ``skeleton`` is plain JSON data describing everything else.
    Raises ``TypeError`` for unsupported types and ``ValueError`` for self-referencing input.
    """
    flattener = _Flattener()
    try:
        skeleton = flattener.node(obj, ())
    except RecursionError as exc:
        raise ValueError("state is nested too deeply to flatten") from exc
    return flattener.tensors, skeleton


def iter_tensor_refs(skeleton: Any) -> Iterator[dict[str, Any]]:
    """Yield every ``tensor``/``ndarray`` node of a skeleton (raises CheckpointError if malformed)."""
    stack = [skeleton]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict):
            raise CheckpointError(None, f"malformed skeleton node {_brief(node)}")
        tag = node.get("t")
        if tag in ("tensor", "ndarray"):
            yield node
        elif tag in ("list", "tuple"):
            stack.extend(_list_field(node, "items"))
        elif tag in ("dict", "odict"):
            for pair in _list_field(node, "items"):
                if not isinstance(pair, list) or len(pair) != 2:
                    raise CheckpointError(None, f"malformed dict item {_brief(pair)}")
                stack.append(pair[1])
            if "meta" in node:
                stack.append(node["meta"])


def expected_entry(node: dict[str, Any]) -> tuple[str, str, list[int]]:
    """Return ``(key, safetensors_code, shape)`` a tensor/ndarray node expects in the file."""
    key = node.get("key")
    shape = node.get("shape")
    if not isinstance(key, str) or not _is_shape(shape):
        raise CheckpointError(None, f"malformed tensor node {_brief(node)}")
    numel = math.prod(shape)
    if node["t"] == "tensor":
        dtype = torch_dtype_from_name(node.get("dtype"))
        if dtype is None:
            raise CheckpointError(None, f"unknown tensor dtype {node.get('dtype')!r}")
        if node.get("enc") == "native" and dtype in NATIVE_CODES:
            return key, NATIVE_CODES[dtype], list(shape)
        if node.get("enc") == "bytes":
            return key, "U8", [numel * _torch_itemsize(dtype)]
        raise CheckpointError(None, f"bad tensor encoding in node {_brief(node)}")
    np_dtype = _numpy_dtype(node.get("dtype"))
    if node.get("enc") == "bytes":
        return key, "U8", [numel * np_dtype.itemsize]
    code = _numpy_native_code(np_dtype)
    if node.get("enc") != "native" or code is None:
        raise CheckpointError(None, f"bad ndarray encoding in node {_brief(node)}")
    return key, code, list(shape)


def unflatten_state(
    tensors: Mapping[str, torch.Tensor],
    skeleton: Any,
    *,
    device: str | torch.device | None = None,
) -> Any:
    """Rebuild the object described by ``skeleton`` from ``tensors`` (inverse of flatten_state).

    Torch tensors are moved to ``device`` when given; numpy arrays always live on the CPU.
    A malformed skeleton, a missing tensor or a dtype/shape mismatch raises CheckpointError.
    """
    target = None if device is None else torch.device(device)
    try:
        return _decode(skeleton, tensors, target)
    except RecursionError as exc:
        raise CheckpointError(None, "skeleton is nested too deeply") from exc


def _decode(node: Any, tensors: Mapping[str, torch.Tensor], device: torch.device | None) -> Any:
    if not isinstance(node, dict):
        raise CheckpointError(None, f"malformed skeleton node {_brief(node)}")
    tag = node.get("t")
    if tag in ("tensor", "ndarray"):
        return _decode_tensor(node, tensors, device)
    if tag in ("list", "tuple"):
        items = [_decode(item, tensors, device) for item in _list_field(node, "items")]
        return items if tag == "list" else tuple(items)
    if tag in ("dict", "odict"):
        result: dict[Any, Any] = {} if tag == "dict" else OrderedDict()
        for pair in _list_field(node, "items"):
            if not isinstance(pair, list) or len(pair) != 2:
                raise CheckpointError(None, f"malformed dict item {_brief(pair)}")
            result[_decode_key(pair[0])] = _decode(pair[1], tensors, device)
        if tag == "odict" and "meta" in node:
            result._metadata = _decode(node["meta"], tensors, device)  # type: ignore[attr-defined]
        return result
    return _decode_scalar(node)


def _decode_key(encoded: Any) -> Any:
    if isinstance(encoded, str):
        return encoded
    if isinstance(encoded, dict) and encoded.get("t") == "tuple":
        return tuple(_decode_key(part) for part in _list_field(encoded, "items"))
    if isinstance(encoded, dict) and encoded.get("t") in ("none", "bool", "int", "float", "str"):
        return _decode_scalar(encoded)
    raise CheckpointError(None, f"malformed dict key {_brief(encoded)}")


def _decode_scalar(node: dict[str, Any]) -> Any:
    tag = node.get("t")
    value = node.get("v")
    try:
        if tag == "none":
            return None
        if tag == "bool" and type(value) is bool:
            return value
        if tag == "int":
            if type(value) is int:
                return value
            return int(_str_field(node, "s"))
        if tag == "float":
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
            text = _str_field(node, "s")
            if text not in ("nan", "inf", "-inf"):
                raise ValueError(text)
            return float(text)
        if tag == "str" and type(value) is str:
            return value
        if tag == "bytes":
            return bytes.fromhex(_str_field(node, "hex"))
        if tag == "dtype":
            dtype = torch_dtype_from_name(value)
            if dtype is not None:
                return dtype
        if tag == "size" and isinstance(value, list) and all(type(v) is int for v in value):
            return torch.Size(value)
        if tag == "npscalar":
            np_dtype = _numpy_dtype(node.get("dtype"))
            raw = bytes.fromhex(_str_field(node, "hex"))
            if len(raw) != np_dtype.itemsize:
                raise ValueError("size mismatch")
            return np.frombuffer(raw, dtype=np_dtype)[0].copy()
    except ValueError as exc:
        raise CheckpointError(None, f"malformed {tag} node {_brief(node)}") from exc
    raise CheckpointError(None, f"malformed skeleton node {_brief(node)}")


def _decode_tensor(
    node: dict[str, Any], tensors: Mapping[str, torch.Tensor], device: torch.device | None
) -> Any:
    key, code, stored_shape = expected_entry(node)
    if key not in tensors:
        raise CheckpointError(None, f"tensor {key!r} referenced by the skeleton is missing")
    stored = tensors[key]
    if NATIVE_CODES.get(stored.dtype) != code or list(stored.shape) != stored_shape:
        raise CheckpointError(
            None,
            f"tensor {key!r} has dtype {stored.dtype} and shape {list(stored.shape)}, "
            f"expected {code} {stored_shape}",
        )
    shape = node["shape"]
    if node["t"] == "ndarray":
        array = stored.detach().cpu().numpy()
        if node["enc"] == "bytes":
            array = array.view(_numpy_dtype(node["dtype"])).reshape(shape)
        return array
    result = stored
    if node["enc"] == "bytes":
        dtype = torch_dtype_from_name(node["dtype"])
        assert dtype is not None
        result = stored.view(dtype).reshape(shape)
    if device is not None and result.device != device:
        result = result.to(device)
    if "requires_grad" in node:
        result = torch.nn.Parameter(result, requires_grad=bool(node["requires_grad"]))
    return result


def _numpy_dtype(text: Any) -> np.dtype[Any]:
    if not isinstance(text, str) or len(text) > 32:
        raise CheckpointError(None, f"bad numpy dtype {text!r}")
    try:
        dtype = np.dtype(text)
    except TypeError as exc:
        raise CheckpointError(None, f"bad numpy dtype {text!r}") from exc
    if dtype.hasobject or dtype.kind == "V" or dtype.itemsize == 0:
        raise CheckpointError(None, f"numpy dtype {text!r} cannot be loaded")
    return dtype


def _numpy_native_code(dtype: np.dtype[Any]) -> str | None:
    if not dtype.isnative:
        return None
    try:
        tensor = torch.from_numpy(np.empty(0, dtype=dtype))
    except TypeError:
        return None
    return NATIVE_CODES.get(tensor.dtype)


def _torch_itemsize(dtype: torch.dtype) -> int:
    try:
        return torch.empty(0, dtype=dtype).element_size()
    except (RuntimeError, TypeError) as exc:
        raise CheckpointError(None, f"dtype {dtype} cannot be loaded") from exc


def _is_shape(value: Any) -> TypeGuard[list[int]]:
    return isinstance(value, list) and all(type(v) is int and v >= 0 for v in value)


def _list_field(node: dict[str, Any], field: str) -> list[Any]:
    value = node.get(field)
    if not isinstance(value, list):
        raise CheckpointError(None, f"malformed skeleton node {_brief(node)}")
    return value


def _str_field(node: dict[str, Any], field: str) -> str:
    value = node.get(field)
    if not isinstance(value, str):
        raise ValueError(f"{field} must be a string")
    return value


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
