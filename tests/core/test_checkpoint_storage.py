"""Tests for the checkpoint storage layer (format, codec, validation, atomicity, RNG)."""

from __future__ import annotations

import json
import logging
import math
import os
import pickle
import random
import struct
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors.torch
import torch
from torch import nn

from agile_core.checkpoint import (
    FORMAT_VERSION,
    CheckpointError,
    CheckpointManager,
    capture_generator_state,
    capture_rng_state,
    flatten_state,
    fsutil,
    generator_from_state,
    inspect_checkpoint,
    read_checkpoint,
    reader,
    restore_generator_state,
    restore_rng_state,
    unflatten_state,
    write_checkpoint,
    writer,
)

# ----------------------------------------------------------------------------- helpers


def assert_same(actual: Any, expected: Any, where: str = "<root>") -> None:
    """Exact structural equality: same types, same keys in the same order, same bits."""
    assert type(actual) is type(expected), f"{where}: {type(actual)} != {type(expected)}"
    if isinstance(expected, torch.Tensor):
        assert actual.dtype == expected.dtype and actual.shape == expected.shape, where
        if isinstance(expected, nn.Parameter):
            assert actual.requires_grad == expected.requires_grad, where
        assert _bits(actual) == _bits(expected), f"{where}: tensor values differ"
    elif isinstance(expected, np.ndarray):
        assert actual.dtype.str == expected.dtype.str and actual.shape == expected.shape, where
        assert actual.tobytes() == expected.tobytes(), f"{where}: array values differ"
    elif isinstance(expected, dict):
        assert list(actual) == list(expected), f"{where}: keys differ"
        for key in expected:
            assert type(next(k for k in actual if k == key)) is type(key), (
                f"{where}: key type {key!r}"
            )
            assert_same(actual[key], expected[key], f"{where}/{key!r}")
        if isinstance(expected, OrderedDict) and hasattr(expected, "_metadata"):
            assert_same(actual._metadata, expected._metadata, f"{where}._metadata")
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), where
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_same(a, e, f"{where}[{i}]")
    elif isinstance(expected, float):
        assert (math.isnan(actual) and math.isnan(expected)) or (
            actual == expected and math.copysign(1, actual) == math.copysign(1, expected)
        ), where
    elif isinstance(expected, np.generic):
        assert actual.dtype == expected.dtype and actual.tobytes() == expected.tobytes(), where
    else:
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"


def _bits(tensor: torch.Tensor) -> bytes:
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    return bytes(flat.view(torch.uint8).numpy().tobytes()) if flat.numel() else b""


def disk_round_trip(tmp_path: Path, state: Any, **read_kwargs: Any) -> Any:
    path = write_checkpoint(tmp_path / "ckpt", {"state": state})
    return read_checkpoint(path, **read_kwargs).part("state")


def memory_round_trip(state: Any) -> Any:
    tensors, skeleton = flatten_state(state)
    json_skeleton = json.loads(json.dumps(skeleton, allow_nan=False))
    return unflatten_state(tensors, json_skeleton)


class _Evil:
    """Unpickling this creates ``marker`` (a stand-in for arbitrary code execution)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.marker), "w"))


def evil_payload(marker: Path) -> bytes:
    payload = pickle.dumps(_Evil(marker))
    return payload


def simple_parts(value: float = 1.0) -> dict[str, Any]:
    return {
        "agent_0": {"w": torch.full((4, 3), value), "n": int(value)},
        "buffer": {"obs": np.full((5,), value, dtype=np.float32)},
    }


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    return write_checkpoint(tmp_path / "ckpt", simple_parts(), metadata={"run": "x"}, step=7)


# ----------------------------------------------------------------------------- round trips


NESTED: dict[Any, Any] = {
    "ints": [0, -1, 2**31, 2**53, -(2**53) - 1, 2**200, -(2**127)],
    "floats": (0.1, -0.0, 1e308, 5e-324, float("inf"), float("-inf"), float("nan")),
    "flags": [True, False, None],
    "text": ["", "héllo ✓", "a/b.c", "__metadata__"],
    "bytes": b"\x00\xffabc",
    "dtype": torch.bfloat16,
    "size": torch.Size([2, 3]),
    "np_scalars": [np.float32(1.5), np.int64(-3), np.bool_(True), np.float64(2.5), np.uint8(7)],
    3: "int key",
    -7: {"nested": {"deeper": [[], (), {}, OrderedDict(b=1, a=2)]}},
    None: "none key",
    True: "bool key",
    2.5: "float key",
    (1, "x"): "tuple key",
    "tensors": [torch.arange(6).reshape(2, 3), torch.tensor(3.0), torch.zeros(0, 4)],
    "arrays": {"a": np.arange(4, dtype=np.int16), "b": np.array(True)},
}


@pytest.mark.parametrize("round_trip", ["memory", "disk"])
def test_nested_structures_round_trip(tmp_path: Path, round_trip: str) -> None:
    result = (
        memory_round_trip(NESTED) if round_trip == "memory" else disk_round_trip(tmp_path, NESTED)
    )
    assert_same(result, NESTED)


def test_skeleton_is_plain_json_and_key_names_are_unique() -> None:
    state = {"a/b": torch.ones(1), "a": {"b": torch.zeros(1)}, "__metadata__": torch.ones(2)}
    tensors, skeleton = flatten_state(state)
    assert len(tensors) == 3 and "__metadata__" not in tensors
    json.dumps(skeleton, allow_nan=False)
    assert_same(unflatten_state(tensors, skeleton), state)


def _train(model: nn.Module, optimizer: torch.optim.Optimizer, batches: list[torch.Tensor]) -> None:
    for batch in batches:
        optimizer.zero_grad()
        loss = model(batch).pow(2).mean()
        loss.backward()
        optimizer.step()


def _make_model() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Tanh(), nn.Linear(8, 2))


def test_adam_state_dict_round_trip_and_identical_next_step(tmp_path: Path) -> None:
    torch.manual_seed(0)
    batches = [torch.randn(6, 4) for _ in range(5)]
    model = _make_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, amsgrad=True)
    _train(model, optimizer, batches[:4])

    path = write_checkpoint(
        tmp_path / "ckpt",
        {"agent_0": {"model": model.state_dict(), "optimizer": optimizer.state_dict()}},
    )
    loaded = read_checkpoint(path).part("agent_0")
    assert_same(loaded["optimizer"], optimizer.state_dict())
    assert_same(loaded["model"], model.state_dict())
    assert all(type(k) is int for k in loaded["optimizer"]["state"])
    assert loaded["optimizer"]["state"][0]["step"].dtype == torch.float32

    fresh_model = _make_model()
    fresh_optimizer = torch.optim.Adam(fresh_model.parameters(), lr=0.5)
    fresh_model.load_state_dict(loaded["model"])
    fresh_optimizer.load_state_dict(loaded["optimizer"])
    _train(model, optimizer, batches[4:])
    _train(fresh_model, fresh_optimizer, batches[4:])
    for name, value in model.state_dict().items():
        assert torch.equal(value, fresh_model.state_dict()[name]), name


def test_module_state_dict_round_trip_keeps_ordered_dict_and_metadata(tmp_path: Path) -> None:
    model = _make_model()
    state = model.state_dict()
    loaded = disk_round_trip(tmp_path, state)
    assert type(loaded) is OrderedDict
    assert loaded._metadata == state._metadata  # type: ignore[attr-defined]
    assert_same(loaded, state)
    assert loaded["1.num_batches_tracked"].dtype == torch.int64
    _make_model().load_state_dict(loaded)


def test_parameters_and_keep_vars_state_dict(tmp_path: Path) -> None:
    model = nn.Linear(2, 2)
    model.bias.requires_grad_(False)
    state = model.state_dict(keep_vars=True)
    loaded = disk_round_trip(tmp_path, state)
    assert_same(loaded, state)


NUMPY_DTYPES = [
    "|b1", "|i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4", "<u8",
    "<f2", "<f4", "<f8", "<c8", "<c16", ">f4", ">i8", "<M8[s]", "<m8[ms]", "<U5", "|S3",
]  # fmt: skip


@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_numpy_arrays_of_many_dtypes(tmp_path: Path, dtype: str) -> None:
    rng = np.random.default_rng(1)
    base = rng.integers(0, 100, size=(3, 4)).astype(np.dtype(dtype))
    arrays = {
        "plain": base,
        "transposed": base.T,
        "strided": base[:, ::2],
        "scalar": base[1, 1].copy().reshape(()),
        "empty": base[:0],
        "readonly": base.copy(),
    }
    arrays["readonly"].flags.writeable = False
    loaded = disk_round_trip(tmp_path, arrays)
    for name, array in arrays.items():
        assert loaded[name].dtype.str == array.dtype.str, name
        assert loaded[name].shape == array.shape, name
        assert np.array_equal(loaded[name], array), name


def test_numpy_float_specials_and_object_arrays_refused(tmp_path: Path) -> None:
    values = np.array([np.nan, -0.0, np.inf, 1e-45], dtype=np.float32)
    loaded = disk_round_trip(tmp_path, values)
    assert loaded.tobytes() == values.tobytes()
    with pytest.raises(TypeError, match="object"):
        flatten_state({"bad": np.array([object()])})


TORCH_DTYPES = [
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint16,
    torch.uint32, torch.uint64, torch.float16, torch.bfloat16, torch.float32, torch.float64,
    torch.complex64, torch.complex128, torch.float8_e4m3fn, torch.float8_e5m2,
]  # fmt: skip


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
def test_torch_dtypes_round_trip(tmp_path: Path, dtype: torch.dtype) -> None:
    source = torch.arange(24, dtype=torch.float64).reshape(4, 6)
    if dtype.is_complex:
        source = source + 1j * source
    tensor = source.to(dtype) if dtype != torch.bool else source.remainder(2).bool()
    state = {"t": tensor, "view": tensor[1:3, ::2], "zero_d": tensor[2, 3].clone()}
    loaded = disk_round_trip(tmp_path, state)
    assert_same(loaded, state)


def test_non_contiguous_shared_and_expanded_tensors(tmp_path: Path) -> None:
    base = torch.arange(20.0).reshape(4, 5)
    state: dict[str, Any] = {
        "base": base,
        "transposed": base.t(),
        "row": base[1],
        "same_object_again": base,
        "expanded": torch.ones(3, 1).expand(3, 4),
        "tied": [base[:, 0], base[:, 0]],
        "conj": (torch.ones(2, dtype=torch.complex64) * (1 + 2j)).conj(),
    }
    tensors, _ = flatten_state(state)
    safetensors.torch.save_file(tensors, str(tmp_path / "direct.safetensors"))  # accepted as is
    loaded = disk_round_trip(tmp_path, state)
    assert_same(loaded, {k: v.resolve_conj() if k == "conj" else v for k, v in state.items()})
    loaded["base"].add_(1)  # loaded tensors are independent and writable
    assert torch.equal(loaded["row"], base[1])


def test_files_are_standard_safetensors(checkpoint: Path) -> None:
    tensors = safetensors.torch.load_file(str(checkpoint / "agent_0.safetensors"))
    assert torch.equal(tensors["w"], torch.full((4, 3), 1.0))
    manifest = json.loads((checkpoint / "manifest.json").read_text())
    assert manifest["format"] == "agile-checkpoint" and manifest["format_version"] == FORMAT_VERSION
    assert set(manifest["versions"]) >= {"torch", "numpy", "agile-core"}
    assert manifest["versions"]["torch"] is not None
    assert manifest["metadata"] == {"run": "x"} and manifest["step"] == 7
    assert sorted(os.listdir(checkpoint)) == [
        "agent_0.safetensors",
        "buffer.safetensors",
        "manifest.json",
    ]


def test_checkpoint_object_lazy_and_map_location(checkpoint: Path) -> None:
    with read_checkpoint(checkpoint, lazy=True, map_location="meta") as opened:
        assert opened.part_names == ("agent_0", "buffer")
        assert opened.metadata == {"run": "x"} and opened.step == 7
        agent = opened.part("agent_0")
        assert agent["w"].device.type == "meta" and agent["n"] == 1
        assert opened.part("agent_0") is agent
    with pytest.raises(CheckpointError, match="closed"):
        opened.part("buffer")
    eager = read_checkpoint(checkpoint)
    assert isinstance(eager.parts["buffer"]["obs"], np.ndarray)
    with pytest.raises(KeyError):
        eager.part("nope")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_tensors_save_and_map_location(tmp_path: Path) -> None:
    state = {"t": torch.arange(5.0, device="cuda")[::2]}
    loaded = disk_round_trip(tmp_path, state, map_location="cuda")
    assert loaded["t"].is_cuda and torch.equal(loaded["t"], state["t"])
    assert disk_round_trip(tmp_path, state)["t"].device.type == "cpu"


def test_unsupported_values_are_refused_before_writing(tmp_path: Path) -> None:
    class Custom:
        pass

    for bad in (
        Custom(),
        {1, 2},
        {"k": lambda: None},
        {object(): 1},
        {"s": torch.ones(2).to_sparse()},
    ):
        with pytest.raises(TypeError):
            write_checkpoint(tmp_path / "bad", {"p": bad})
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="self-referencing"):
        write_checkpoint(tmp_path / "bad", {"p": loop})
    for bad_name in ("../x", ".hidden", "", "a/b", 3):
        with pytest.raises(ValueError, match="part name"):
            write_checkpoint(tmp_path / "bad", {bad_name: 1})  # type: ignore[dict-item]
    assert not (tmp_path / "bad").exists()
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "metadata",
    [{"t": (1, 2)}, {1: "int key"}, {"x": float("nan")}, {"x": np.float32(1)}, {"x": object()}],
    ids=["tuple", "int-key", "nan", "np-scalar", "object"],
)
def test_metadata_must_be_exact_json(tmp_path: Path, metadata: dict[Any, Any]) -> None:
    with pytest.raises(TypeError, match="metadata"):
        write_checkpoint(tmp_path / "c", {}, metadata=metadata)


def test_metadata_big_ints_round_trip(tmp_path: Path) -> None:
    metadata = {"big": 2**127 + 3, "neg": -(2**90), "nested": {"list": [1.5, None, True, "s"]}}
    path = write_checkpoint(tmp_path / "c", {}, metadata=metadata)
    assert read_checkpoint(path).metadata == metadata


# ----------------------------------------------------------------------------- RNG


def _draw() -> tuple[Any, ...]:
    return (
        [random.random() for _ in range(3)],
        random.gauss(0, 1),
        np.random.rand(3).tolist(),
        np.random.randn(),  # leaves a cached gaussian in the legacy state
        torch.rand(3).tolist(),
        torch.randn(2).tolist(),
    )


def test_global_rng_capture_restore(tmp_path: Path) -> None:
    random.seed(3)
    np.random.seed(4)
    torch.manual_seed(5)
    _draw()
    random.gauss(0, 1)  # python keeps gauss_next after an odd number of gauss draws
    state = capture_rng_state()
    first = _draw()
    restore_rng_state(state)
    assert _draw() == first

    path = write_checkpoint(tmp_path / "ckpt", {"rng": state})
    random.seed(99)
    np.random.seed(99)
    torch.manual_seed(99)
    restore_rng_state(read_checkpoint(path).part("rng"))
    assert _draw() == first


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_rng_capture_restore() -> None:
    torch.cuda.manual_seed_all(1)
    state = capture_rng_state(include_cuda=True)
    first = torch.rand(4, device="cuda").tolist()
    restore_rng_state(state)
    assert torch.rand(4, device="cuda").tolist() == first


def test_restore_rng_state_refuses_unknown_entries() -> None:
    with pytest.raises(ValueError, match="unknown"):
        restore_rng_state({"python": None, "jax": 1})


@pytest.mark.parametrize("name", ["PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64"])
def test_numpy_generator_state_survives_json_exactly(tmp_path: Path, name: str) -> None:
    generator = np.random.Generator(getattr(np.random, name)(12345))
    generator.random(7)
    generator.integers(0, 10, size=3, dtype=np.uint32)  # leaves a buffered uint32
    state = capture_generator_state(generator)
    text = json.dumps(state)
    assert json.loads(text) == state
    expected = generator.random(5).tolist() + generator.integers(0, 2**63, size=3).tolist()

    restored = generator_from_state(json.loads(text))
    assert restored.random(5).tolist() + restored.integers(0, 2**63, size=3).tolist() == expected

    other = np.random.Generator(getattr(np.random, name)(1))
    path = write_checkpoint(tmp_path / "ckpt", {}, metadata={"env_rng": state})
    restore_generator_state(other, read_checkpoint(path).metadata["env_rng"])
    assert other.random(5).tolist() + other.integers(0, 2**63, size=3).tolist() == expected


def test_generator_state_holds_big_ints_and_checks_algorithm() -> None:
    state = capture_generator_state(np.random.default_rng(2**100))
    assert state["state"]["state"] > 2**64 and state["state"]["inc"] > 2**64
    assert json.loads(json.dumps(state))["state"]["state"] == state["state"]["state"]
    with pytest.raises(ValueError, match="PCG64"):
        restore_generator_state(np.random.Generator(np.random.MT19937()), state)


# ----------------------------------------------------------------------------- refusal


@pytest.fixture
def no_unpickling(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every code-executing loader explode, to prove loading never calls one."""

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a pickle-based loader was called")

    for module, name in [
        (pickle, "load"), (pickle, "loads"), (pickle, "Unpickler"),
        (torch, "load"), (np, "load"),
    ]:  # fmt: skip
        monkeypatch.setattr(module, name, forbidden)


def test_evil_payload_is_live(tmp_path: Path) -> None:
    """Sanity check of the test payload itself: unpickling it really creates the file."""
    marker = tmp_path / "pwned-by-sanity-check"
    pickle.loads(evil_payload(marker))
    assert marker.exists()


@pytest.mark.usefixtures("no_unpickling")
@pytest.mark.parametrize("victim", ["agent_0.safetensors", "manifest.json"])
def test_pickle_payload_is_refused_and_not_executed(
    checkpoint: Path, tmp_path: Path, victim: str
) -> None:
    marker = tmp_path / "pwned"
    (checkpoint / victim).write_bytes(evil_payload(marker))
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(checkpoint)
    assert str(checkpoint) in str(info.value)
    assert not marker.exists()


@pytest.mark.usefixtures("no_unpickling")
def test_torch_save_file_in_place_of_safetensors_is_refused(
    checkpoint: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    torch.save({"x": _Evil(marker)}, checkpoint / "buffer.safetensors")
    with pytest.raises(CheckpointError, match=r"not a safetensors file|bytes"):
        read_checkpoint(checkpoint)
    assert not marker.exists()


@pytest.mark.parametrize("keep", [0, 5, 8, 40, -1])
def test_truncated_safetensors_is_refused(checkpoint: Path, keep: int) -> None:
    target = checkpoint / "agent_0.safetensors"
    data = target.read_bytes()
    target.write_bytes(data[:keep] if keep >= 0 else data[:-1])
    with pytest.raises(CheckpointError, match=r"agent_0\.safetensors"):
        read_checkpoint(checkpoint)


def test_data_corruption_is_caught_by_checksum(checkpoint: Path) -> None:
    target = checkpoint / "agent_0.safetensors"
    data = bytearray(target.read_bytes())
    data[-1] ^= 0xFF
    target.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="checksum"):
        read_checkpoint(checkpoint)
    assert read_checkpoint(checkpoint, verify=False).part("agent_0")["n"] == 1


def test_missing_part_file_is_refused(checkpoint: Path) -> None:
    (checkpoint / "buffer.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"buffer\.safetensors.*missing"):
        read_checkpoint(checkpoint)


def _edit_manifest(checkpoint: Path, **changes: Any) -> None:
    path = checkpoint / "manifest.json"
    document = json.loads(path.read_text())
    document.update(changes)
    path.write_text(json.dumps(document))


def test_wrong_magic_is_refused(checkpoint: Path) -> None:
    _edit_manifest(checkpoint, format="someone-elses-format")
    with pytest.raises(CheckpointError, match="not an agile checkpoint"):
        read_checkpoint(checkpoint)


def test_newer_format_version_is_refused(checkpoint: Path) -> None:
    _edit_manifest(checkpoint, format_version=FORMAT_VERSION + 1)
    with pytest.raises(CheckpointError, match="newer agile-core"):
        read_checkpoint(checkpoint)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not json",
        "[1, 2]",
        '{"format": "agile-checkpoint", "format_version": true}',
        '{"a": 1, "a": 2}',
    ],
)
def test_malformed_manifest_is_refused(checkpoint: Path, text: str) -> None:
    (checkpoint / "manifest.json").write_text(text)
    with pytest.raises(CheckpointError, match="manifest"):
        read_checkpoint(checkpoint)


def test_part_file_outside_directory_is_refused(checkpoint: Path, tmp_path: Path) -> None:
    document = json.loads((checkpoint / "manifest.json").read_text())
    document["parts"]["agent_0"]["file"] = "../elsewhere.safetensors"
    (checkpoint / "manifest.json").write_text(json.dumps(document))
    with pytest.raises(CheckpointError, match="must be stored in"):
        read_checkpoint(checkpoint)


def test_symlinked_part_file_is_refused(checkpoint: Path, tmp_path: Path) -> None:
    target = checkpoint / "agent_0.safetensors"
    moved = tmp_path / "moved.safetensors"
    target.rename(moved)
    target.symlink_to(moved)
    with pytest.raises(CheckpointError, match="symlink"):
        read_checkpoint(checkpoint)


def test_header_not_matching_skeleton_is_refused(checkpoint: Path) -> None:
    target = checkpoint / "agent_0.safetensors"
    safetensors.torch.save_file({"w": torch.zeros(3, 4)}, str(target))  # other shape, "n" absent
    _fix_size(checkpoint, "agent_0")
    with pytest.raises(CheckpointError, match=r"manifest expects|do not match"):
        read_checkpoint(checkpoint, verify=False)


def test_header_with_overlapping_offsets_is_refused(checkpoint: Path) -> None:
    header = {
        "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},
    }
    raw = json.dumps(header).encode()
    (checkpoint / "agent_0.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(12))
    with pytest.raises(CheckpointError, match="does not start"):
        read_checkpoint(checkpoint)


def _fix_size(checkpoint: Path, part: str) -> None:
    document = json.loads((checkpoint / "manifest.json").read_text())
    document["parts"][part]["bytes"] = (checkpoint / f"{part}.safetensors").stat().st_size
    (checkpoint / "manifest.json").write_text(json.dumps(document))


def test_directory_that_is_not_a_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("hi")
    for directory in ("empty", "other"):
        with pytest.raises(CheckpointError, match="not a checkpoint"):
            read_checkpoint(tmp_path / directory)
    with pytest.raises(CheckpointError, match="refusing to replace"):
        write_checkpoint(tmp_path / "other", {"p": 1})
    assert (tmp_path / "other" / "notes.txt").exists()


def test_path_that_is_a_file_or_missing(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(CheckpointError, match="not a directory"):
        read_checkpoint(tmp_path / "file")
    with pytest.raises(CheckpointError, match="does not exist"):
        read_checkpoint(tmp_path / "missing")
    with pytest.raises(CheckpointError, match="not a checkpoint directory"):
        write_checkpoint(tmp_path / "file", {"p": 1})
    assert isinstance(CheckpointError(tmp_path, "x"), ValueError)


# ----------------------------------------------------------------------------- atomicity


@pytest.fixture(params=["exchange", "backup"])
def publish_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(fsutil, "USE_RENAME_EXCHANGE", request.param == "exchange")
    return str(request.param)


def _value_of(path: Path) -> float:
    return float(read_checkpoint(path).part("agent_0")["w"][0, 0])


def test_overwrite_replaces_and_leaves_nothing_behind(tmp_path: Path, publish_mode: str) -> None:
    path = tmp_path / "ckpt"
    write_checkpoint(path, simple_parts(1.0))
    write_checkpoint(path, simple_parts(2.0), metadata={"second": True})
    assert _value_of(path) == 2.0 and read_checkpoint(path).metadata == {"second": True}
    assert os.listdir(tmp_path) == ["ckpt"]
    with pytest.raises(FileExistsError):
        write_checkpoint(path, simple_parts(3.0), replace=False)


class _Crash(BaseException):
    pass


# (protocol, crash after the n-th directory fsync) -> what a reader must see at the path
CRASH_POINTS = {
    ("exchange", 1): 1.0,  # staging complete, nothing published yet
    ("exchange", 2): 2.0,  # exchanged; the staging name holds the old checkpoint
    ("backup", 1): 1.0,  # staging complete, nothing published yet
    ("backup", 2): 1.0,  # old moved to .old-*, new not yet in place: reader uses the backup
    ("backup", 3): 2.0,  # new in place, backup not yet deleted
}


@pytest.mark.parametrize(("protocol", "crash_at"), list(CRASH_POINTS))
def test_crash_at_every_durability_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, protocol: str, crash_at: int
) -> None:
    """Kill the writer right after its n-th fsync (no cleanup runs) and check the state."""
    monkeypatch.setattr(fsutil, "USE_RENAME_EXCHANGE", protocol == "exchange")
    path = tmp_path / "ckpt"
    write_checkpoint(path, simple_parts(1.0))
    calls = {"n": 0}
    real_fsync_dir = writer.fsync_dir

    def crashing_fsync_dir(target: Any) -> None:
        real_fsync_dir(target)
        calls["n"] += 1
        if calls["n"] == crash_at:
            # a killed process runs no cleanup
            monkeypatch.setattr(writer, "remove_tree", lambda *_: None)
            raise _Crash()

    monkeypatch.setattr(writer, "fsync_dir", crashing_fsync_dir)
    with pytest.raises(_Crash):
        write_checkpoint(path, simple_parts(2.0))
    monkeypatch.setattr(writer, "fsync_dir", real_fsync_dir)
    monkeypatch.setattr(writer, "remove_tree", fsutil.remove_tree)

    assert _value_of(path) == CRASH_POINTS[(protocol, crash_at)]
    assert path.exists() == ((protocol, crash_at) != ("backup", 2))
    manager = CheckpointManager(tmp_path, overwrite=True, latest_name="ckpt")
    assert manager.latest() == path.absolute()
    assert len(os.listdir(tmp_path)) == 2  # one leftover directory ...
    write_checkpoint(path, simple_parts(3.0))
    assert _value_of(path) == 3.0
    assert os.listdir(tmp_path) == ["ckpt"]  # ... which the next write removed


def test_reader_retries_when_directory_is_replaced_while_opening(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_checkpoint(tmp_path / "ckpt", simple_parts(1.0))
    real_open_member = reader._open_member
    swaps = {"n": 0}

    def open_member_with_writer_racing(dir_fd: int, directory: Path, name: str) -> int:
        if name.endswith(".safetensors") and swaps["n"] == 0:
            swaps["n"] += 1  # a writer replaces the checkpoint between our opens
            write_checkpoint(path, simple_parts(2.0))
        return real_open_member(dir_fd, directory, name)

    monkeypatch.setattr(reader, "_open_member", open_member_with_writer_racing)
    opened = read_checkpoint(path)
    assert swaps["n"] == 1
    assert opened.part("agent_0")["w"][0, 0] == 2.0 and opened.part("buffer")["obs"][0] == 2.0


def test_lazy_checkpoint_keeps_reading_the_version_it_opened(tmp_path: Path) -> None:
    path = write_checkpoint(tmp_path / "ckpt", simple_parts(1.0))
    with read_checkpoint(path, lazy=True) as opened:
        write_checkpoint(path, simple_parts(2.0))  # old files are unlinked, still open here
        assert opened.part("agent_0")["w"][0, 0] == 1.0
        assert opened.part("buffer")["obs"][0] == 1.0
    assert _value_of(path) == 2.0


def test_reader_uses_backup_when_destination_missing(tmp_path: Path) -> None:
    path = write_checkpoint(tmp_path / "ckpt", simple_parts(1.0))
    backup = tmp_path / fsutil.side_name("old", "ckpt")
    os.rename(path, backup)
    staged = write_checkpoint(tmp_path / "staged", simple_parts(2.0))
    os.rename(staged, tmp_path / fsutil.side_name("tmp", "ckpt"))
    broken = tmp_path / fsutil.side_name("old", "ckpt")
    broken.mkdir()  # an incomplete backup must never be chosen

    opened = read_checkpoint(path)
    assert opened.path == backup and opened.part("agent_0")["w"][0, 0] == 1.0
    assert inspect_checkpoint(path).step is None
    manager = CheckpointManager(tmp_path, overwrite=True, latest_name="ckpt")
    assert manager.latest() == path
    assert sorted(os.listdir(tmp_path))[0].startswith(".")  # reading modified nothing
    assert len(os.listdir(tmp_path)) == 3

    manager.save(5, simple_parts(5.0))  # the writer restores the backup, then replaces it
    assert sorted(os.listdir(tmp_path)) == [".agile-checkpoint.lock", "ckpt"]
    assert _value_of(path) == 5.0


def test_readers_ignore_staging_directories(tmp_path: Path) -> None:
    staged = write_checkpoint(tmp_path / "x", simple_parts(9.0))
    os.rename(staged, tmp_path / fsutil.side_name("tmp", "checkpoint_000000009"))
    manager = CheckpointManager(tmp_path)
    assert manager.latest() is None and manager.list() == []
    with pytest.raises(CheckpointError):
        read_checkpoint(tmp_path / "checkpoint_000000009")


# ----------------------------------------------------------------------------- manager


def test_manager_numbered_mode(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path / "run")
    assert manager.latest() is None and manager.list() == []
    for step in (9, 10, 100, 2):
        path = manager.save(step, simple_parts(float(step)), metadata={"step": step})
        assert path.name == f"checkpoint_{step:09d}"
    assert [p.name for p in manager.list()] == [
        "checkpoint_000000002", "checkpoint_000000009", "checkpoint_000000010", "checkpoint_000000100",
    ]  # fmt: skip
    assert manager.latest() == tmp_path / "run" / "checkpoint_000000100"
    loaded = manager.load_latest()
    assert loaded is not None and loaded.step == 100 and loaded.metadata == {"step": 100}


def test_manager_keep_last_prunes_oldest(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, keep_last=2)
    for step in range(5):
        manager.save(step, simple_parts(float(step)))
    assert [p.name for p in manager.list()] == ["checkpoint_000000003", "checkpoint_000000004"]
    assert sorted(os.listdir(tmp_path)) == [
        ".agile-checkpoint.lock", "checkpoint_000000003", "checkpoint_000000004",
    ]  # fmt: skip


def test_manager_keep_last_never_deletes_the_new_save(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, keep_last=2)
    for step in (10, 11, 12):
        manager.save(step, simple_parts(float(step)))
    manager.save(3, simple_parts(3.0))  # e.g. resumed from an early checkpoint
    assert [p.name for p in manager.list()] == ["checkpoint_000000003", "checkpoint_000000012"]


def test_manager_latest_skips_corrupt_newest(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    manager = CheckpointManager(tmp_path)
    manager.save(1, simple_parts(1.0))
    newest = manager.save(2, simple_parts(2.0))
    (newest / "buffer.safetensors").write_bytes(b"\x00" * 3)
    with caplog.at_level(logging.WARNING):
        assert manager.latest() == tmp_path / "checkpoint_000000001"
    assert "skipping unreadable checkpoint" in caplog.text


def test_manager_overwrite_mode(tmp_path: Path, publish_mode: str) -> None:
    manager = CheckpointManager(tmp_path, overwrite=True)
    assert manager.latest() is None
    for step in range(3):
        assert manager.save(step, simple_parts(float(step))) == tmp_path / "latest"
    assert manager.list() == [tmp_path / "latest"]
    loaded = manager.load_latest()
    assert loaded is not None and loaded.step == 2 and loaded.part("agent_0")["n"] == 2
    assert sorted(os.listdir(tmp_path)) == [".agile-checkpoint.lock", "latest"]


def test_manager_rejects_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        CheckpointManager(tmp_path, keep_last=0)
    with pytest.raises(ValueError):
        CheckpointManager(tmp_path, prefix="../x")
    manager = CheckpointManager(tmp_path)
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError):
            manager.save(bad, {})  # type: ignore[arg-type]


def test_load_latest_retries_when_found_checkpoint_is_pruned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = CheckpointManager(tmp_path)
    manager.save(1, simple_parts(1.0))
    real_latest = manager.latest
    answers = iter([tmp_path / "checkpoint_000000000"])  # already pruned by a writer

    monkeypatch.setattr(manager, "latest", lambda: next(answers, None) or real_latest())
    loaded = manager.load_latest()
    assert loaded is not None and loaded.step == 1
