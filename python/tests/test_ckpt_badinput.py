# SPDX-License-Identifier: MIT
"""Damaged checkpoints give clear, one-line errors naming the file and the
cause, from the CLI (`tierfs ckpt show` / `verify`, exit 1) and from
tierfs.torch.load (TierfsError), and never data:

- a truncated shard;
- a header length beyond the end of the file;
- overlapping data offsets;
- an unknown dtype;
- an index naming a shard that does not exist;
- a flipped data byte (checksum mismatch naming the tensor).

For the format defects the index is rewritten to match the damaged file
(as a buggy writer would have committed it), so that what is caught is the
defect itself, not the mismatch with the index.
"""
import ctypes
import json
import os
import shutil
import struct
import subprocess

import pytest
import torch

import tierfs.torch as tt
from ckpt_common import TIERFS
from tierfs import TierfsError

_xxh = ctypes.CDLL("libxxhash.so.0")        # the system's, not ours
_xxh.XXH3_64bits.restype = ctypes.c_uint64
_xxh.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]

SHARD = "model-rank00000-00001.safetensors"


def xxh3(data):
    return _xxh.XXH3_64bits(data, len(data))


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    root = str(d / "good")
    os.environ["TIERFS_CKPT_STAGING"] = str(d / "staging")
    torch.manual_seed(3)
    tt.save({"a": torch.randn(64, 64), "b": torch.arange(100),
             "c": torch.ones(3, dtype=torch.float16)},
            f"{root}/step-000001", async_=False, staging_keep=0)
    return root


def damaged(good, tmp_path, fn):
    """A copy of the good checkpoint with fn(shard bytes) -> new bytes
    applied to the shard, the index then made to match it."""
    root = str(tmp_path / "ck")
    shutil.copytree(good, root)
    step = os.path.join(root, "step-000001")
    path = os.path.join(step, SHARD)
    with open(path, "rb") as f:
        data = fn(f.read())
    with open(path, "wb") as f:
        f.write(data)
    ipath = os.path.join(step, "model.safetensors.index.json")
    with open(ipath) as f:
        index = json.load(f)
    info = index["tierfs"]["files"][SHARD]
    n = min(struct.unpack("<Q", data[:8])[0] + 8, len(data))
    info.update(size=len(data), header_size=n,
                header_xxh3=f"{xxh3(data[:n]):016x}",
                data_xxh3=f"{xxh3(data[n:]):016x}")
    with open(ipath, "w") as f:
        json.dump(index, f)
    return root


def header_edit(fn):
    """Edit the header JSON text, keeping its length (space padded)."""
    def edit(data):
        n = struct.unpack("<Q", data[:8])[0]
        text = data[8:8 + n].decode()
        new = fn(text)
        assert len(new) <= n
        return data[:8] + new.ljust(n).encode() + data[8 + n:]
    return edit


def overlap(text):
    """Move the second tensor (by offset) 8 bytes back, into the first."""
    h = json.loads(text)
    name = sorted((v["data_offsets"][0], k) for k, v in h.items()
                  if k != "__metadata__")[1][1]
    b0, e0 = h[name]["data_offsets"]
    h[name]["data_offsets"] = [b0 - 8, e0 - 8]
    return json.dumps(h, separators=(",", ":"))


def expect_error(root, *words):
    """CLI and Python both fail with one line holding every word."""
    for cmd in ("show", "verify"):
        p = subprocess.run([TIERFS, "ckpt", cmd, f"{root}/step-000001"],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 1, (cmd, p.stdout, p.stderr)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1, p.stderr
        for w in words:
            assert w in lines[0], (cmd, w, lines[0])
    with pytest.raises(TierfsError) as e:
        tt.load(root, lazy=False, use_staging=False)
    for w in words:
        assert w in str(e.value), (w, str(e.value))
    return lines[0]


def test_good(good):
    p = subprocess.run([TIERFS, "ckpt", "verify", f"{good}/step-000001"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


def test_truncated(good, tmp_path):
    root = damaged(good, tmp_path, lambda d: d[:-10])
    print(expect_error(root, SHARD, "truncated"))


def test_header_length_beyond_file(good, tmp_path):
    root = damaged(good, tmp_path,
                   lambda d: struct.pack("<Q", len(d) * 2) + d[8:])
    print(expect_error(root, SHARD, "header length", "beyond the file"))


def test_overlapping_offsets(good, tmp_path):
    root = damaged(good, tmp_path, header_edit(overlap))
    print(expect_error(root, SHARD, "overlaps"))


def test_unknown_dtype(good, tmp_path):
    root = damaged(good, tmp_path,
                   header_edit(lambda t: t.replace('"F16"', '"Q16"')))
    print(expect_error(root, SHARD, "unknown dtype 'Q16'"))


def test_index_names_missing_file(good, tmp_path):
    root = str(tmp_path / "ck")
    shutil.copytree(good, root)
    os.unlink(os.path.join(root, "step-000001", SHARD))
    print(expect_error(root, SHARD, "missing (named by the index)"))


def test_checksum_mismatch(good, tmp_path):
    root = str(tmp_path / "ck")
    shutil.copytree(good, root)
    path = os.path.join(root, "step-000001", SHARD)
    with open(path, "r+b") as f:
        f.seek(-5, os.SEEK_END)
        c = f.read(1)
        f.seek(-5, os.SEEK_END)
        f.write(bytes([c[0] ^ 1]))
    p = subprocess.run([TIERFS, "ckpt", "verify", f"{root}/step-000001"],
                       capture_output=True, text=True)
    assert p.returncode == 1
    assert "checksum mismatch" in p.stderr and SHARD in p.stderr
    with pytest.raises(TierfsError) as e:
        tt.load(root, lazy=False, use_staging=False)
    assert "checksum mismatch" in str(e.value) and SHARD in str(e.value)
    assert "tensor '" in str(e.value)
