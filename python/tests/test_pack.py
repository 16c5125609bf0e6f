# SPDX-License-Identifier: MIT
"""tierfs pack and the Python loader, end to end (Debian's python3 with
python3-torch): the real `tierfs pack` binary, GNU tar, Python's tarfile,
WebDataset's grouping rules, DataLoader workers over a directory and over
the local Ceph RGW, resumption, decoders, damage, the StallMeter.

Environment (set by tests/tests.cmake): TFS_TEST_BIN, TIERFS_LIB,
TFS_TEST_S3_URI (s3://bucket) with the server's AWS_* variables.
"""
import io
import json
import os
import random
import re
import subprocess
import tarfile
import time
import uuid
import warnings
import zlib

import pytest
from torch.utils.data import DataLoader

import tierfs
from tierfs import data as tdata
from tierfs.torch import ShardDataset, ShardIndexDataset, StallMeter

TIERFS = os.environ.get("TFS_TEST_BIN", "tierfs")
S3 = os.environ.get("TFS_TEST_S3_URI")


def make_tree(root, n=150, seed=1):
    """n samples: jpg (random bytes), cls, some .npy/.json/.txt fields,
    a few long names.  Returns {key: {field: bytes}}."""
    import numpy
    rng = random.Random(seed)
    tree = {}
    for i in range(n):
        if i == 3:
            key = "train/" + "d" * 120 + f"/{i:05d}"    # ustar prefix
        elif i == 4:
            key = "train/" + "k" * 150 + f"{i:05d}"     # pax header
        else:
            key = f"train/c{i % 5}/{i:05d}"
        fields = {"jpg": rng.randbytes(rng.randint(0, 6000)),
                  "cls": str(i % 10).encode()}
        if i % 7 == 0:
            buf = io.BytesIO()
            numpy.save(buf, numpy.arange(i, dtype=numpy.int32))
            fields["npy"] = buf.getvalue()
        if i % 11 == 0:
            fields["meta.json"] = json.dumps({"i": i}).encode()
            fields["txt"] = f"caption {i}".encode()
        tree[key] = fields
        for field, data in fields.items():
            path = os.path.join(root, f"{key}.{field}")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
    return tree


def pack(src, dst, *args, check=True):
    return subprocess.run([TIERFS, "pack", "-q", *args, src, dst],
                          capture_output=True, text=True, check=check)


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    top = tmp_path_factory.mktemp("pack")
    tree = make_tree(str(top / "src"))
    dst = str(top / "dst")
    pack(str(top / "src"), dst, "--shard-size", "64K", "--shuffle-seed",
         "9")
    return tree, dst


def shard_paths(dst):
    with open(os.path.join(dst, "manifest.json")) as f:
        m = json.load(f)
    return m, [os.path.join(dst, s["name"]) for s in m["shards"]]


def check_sample(tree, s):
    want = tree[s["__key__"]]
    fields = {k: v for k, v in s.items() if not k.startswith("__")}
    assert set(fields) == set(want)
    for k, v in fields.items():
        assert v == want[k], (s["__key__"], k)


# ---- the tar shards as other readers see them ----

def test_gnu_tar_and_tarfile_agree(packed):
    tree, dst = packed
    m, shards = shard_paths(dst)
    assert m["samples"] == len(tree) and len(shards) > 3
    total = 0
    for path in shards:
        gnu = subprocess.run(["tar", "-tvf", path], capture_output=True,
                             text=True, check=True)
        assert gnu.stderr == ""
        gnu_members = []
        for line in gnu.stdout.splitlines():
            f = line.split(None, 5)
            gnu_members.append((f[5], int(f[2])))
        with tarfile.open(path) as t:
            py_members = [(i.name, i.size) for i in t.getmembers()]
            assert all(i.isreg() for i in t.getmembers())
        assert gnu_members == py_members
        total += len(py_members)
    assert total == sum(len(f) for f in tree.values())


def test_gnu_tar_extracts_every_byte(packed, tmp_path):
    tree, dst = packed
    _, shards = shard_paths(dst)
    for path in shards:
        subprocess.run(["tar", "-xf", path, "-C", str(tmp_path)],
                       check=True)
    for key, fields in tree.items():
        for field, data in fields.items():
            with open(tmp_path / f"{key}.{field}", "rb") as f:
                assert f.read() == data


def webdataset_samples(path):
    """WebDataset's tar_file_iterator + group_by_keys, as its sources
    define them (the library itself is not packaged for Debian): regular
    members only, __meta__ names skipped, key/field by the regex, fields
    lower-cased, adjacent members of one key grouped, duplicates an
    error."""
    regex = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
    current = None
    with open(path, "rb") as f, tarfile.open(fileobj=f, mode="r|*") as t:
        for info in t:
            if not info.isreg() or re.match(r"__[^/]*__($|/)", info.name):
                continue
            m = regex.match(info.name)
            if not m:
                continue
            key, suffix = m.group(1), m.group(2).lower()
            data = t.extractfile(info).read()
            if current is None or key != current["__key__"]:
                if current is not None:
                    yield current
                current = {"__key__": key, "__url__": path}
            assert suffix not in current, f"duplicate {suffix} in {key}"
            current[suffix] = data
    if current is not None:
        yield current


def test_webdataset_reads_the_same_samples(packed):
    tree, dst = packed
    _, shards = shard_paths(dst)
    seen = []
    for path in shards:
        for s in webdataset_samples(path):
            check_sample(tree, s)
            seen.append(s["__key__"])
    assert sorted(seen) == sorted(tree)


# ---- the Python reader ----

def test_index_dataset_every_byte(packed):
    tree, dst = packed
    ds = ShardIndexDataset(dst)
    assert len(ds) == len(tree)
    keys = []
    for i in range(len(ds)):
        s = ds[i]
        assert s["__index__"] == i
        assert s["__url__"].startswith("shard-")
        check_sample(tree, s)
        keys.append(s["__key__"])
    assert sorted(keys) == sorted(tree)
    with pytest.raises(IndexError):
        ds[len(ds)]
    assert ds.cache_stats()["read_bytes"] > 0


def test_decoders(packed):
    tree, dst = packed
    ds = ShardIndexDataset(dst, decode=True)
    n_npy = n_json = 0
    for i in range(len(ds)):
        s = ds[i]
        assert isinstance(s["cls"], int)
        assert isinstance(s["jpg"], bytes)
        if "npy" in s:
            i_key = int(s["__key__"][-5:])
            assert s["npy"].tolist() == list(range(i_key))
            n_npy += 1
        if "meta.json" in s:
            assert s["meta.json"]["i"] == int(s["__key__"][-5:])
            assert s["txt"].startswith("caption ")
            n_json += 1
    assert n_npy > 5 and n_json > 5
    ds = ShardIndexDataset(dst, decode=["cls"],
                           decoders={"jpg": lambda b: len(b)})
    s = ds[0]
    assert isinstance(s["cls"], int) and isinstance(s["jpg"], int)


def epoch_keys(dst, epoch, **kw):
    ds = ShardDataset(dst, **kw)
    ds.set_epoch(epoch)
    return [s["__key__"] for s in ds]


def test_epochs_deterministic(packed):
    tree, dst = packed
    a = epoch_keys(dst, 1, seed=4)
    assert a == epoch_keys(dst, 1, seed=4)
    assert a != epoch_keys(dst, 2, seed=4)
    assert a != epoch_keys(dst, 1, seed=5)
    assert sorted(a) == sorted(tree)


def as_list(batch):
    """collate_fn: samples have different fields (npy, json), so keep
    the batch a list of dicts."""
    return batch


def loader(ds, **kw):
    return DataLoader(ds, collate_fn=as_list, **kw)


def loader_keys(ds, workers, batch_size=8):
    out = []
    for batch in loader(ds, batch_size=batch_size, num_workers=workers):
        out.extend(s["__key__"] for s in batch)
    return out


def test_many_fields_and_long_names(tmp_path):
    """A sample wider than the reader's first buffers (64 fields, 4 KiB of
    names): the one-call path grows them and loses nothing."""
    src = tmp_path / "src"
    src.mkdir()
    want = {}
    for k in range(3):
        key = f"s{k}-" + "n" * 60
        fields = {}
        for f in range(70):
            name = f"f{f:03d}." + "x" * 40
            data = bytes([k, f]) * (f + 1)
            (src / f"{key}.{name}").write_bytes(data)
            fields[name] = data
        want[key] = fields
    dst = str(tmp_path / "dst")
    pack(str(src), dst)
    ds = tdata.PackedDataset(dst)
    try:
        it = ds.iterator(shuffle=False)
        it.start(0)
        got = {}
        for smp in it.samples():
            got[smp["__key__"]] = {k: v for k, v in smp.items()
                                   if not k.startswith("__")}
        it.close()
    finally:
        ds.close()
    assert got == want


def test_ram_need_and_warning(packed, monkeypatch):
    """The RAM tier a stream needs: prefetch window + 6 x buffer x the
    average sample + 2 blocks; a smaller mem_cache warns, once."""
    tree, dst = packed
    _, paths = shard_paths(dst)
    tar_bytes = sum(os.path.getsize(p) for p in paths)
    n, shards = len(tree), len(paths)
    per = tar_bytes / n
    window = min(2 * n / shards * per, (64 << 10) // 4)  # mem_cache / 4
    want = int(window + 6.0 * 100 * per) + 2 * (64 << 10)
    ds = tdata.PackedDataset(dst, cache_options={"mem_cache": "64K",
                                                 "block_size": "64K"})
    try:
        it = ds.iterator(shuffle_buffer=100)
        assert abs(it.ram_need() - want) <= 2
        monkeypatch.setattr(tdata, "_ram_warned", [None])
        with pytest.warns(RuntimeWarning, match="RAM tier"):
            it.start(0)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            it.start(1)                 # once per process
        it.close()
        it = ds.iterator(shuffle=False)
        assert it.ram_need() == int(window) + 2 * (64 << 10)
        it.close()
    finally:
        ds.close()
    ds = tdata.PackedDataset(dst, cache_options={"mem_cache": "1G",
                                                 "block_size": "64K"})
    try:
        monkeypatch.setattr(tdata, "_ram_warned", [None])
        it = ds.iterator(shuffle_buffer=100)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            it.start(0)                 # enough: no warning
        it.close()
    finally:
        ds.close()


def test_dataloader_ranks_and_workers(packed):
    tree, dst = packed
    n = len(tree)
    world = 3
    per_rank = -(-n // world)
    union = []
    for rank in range(world):
        ds = ShardDataset(dst, rank=rank, world_size=world, seed=2)
        ds.set_epoch(7)
        assert len(ds) == per_rank
        keys = loader_keys(ds, 4)
        assert len(keys) == per_rank
        # The union over workers is the same for any number of them.
        assert sorted(keys) == sorted(loader_keys(ds, 0))
        assert sorted(keys) == sorted(loader_keys(ds, 2))
        union += keys
    assert set(union) == set(tree)
    assert len(union) - len(set(union)) == per_rank * world - n   # padding
    ds = ShardDataset(dst, rank=1, world_size=world, drop_last=True)
    assert len(loader_keys(ds, 4)) == n // world


def test_resume_mid_epoch(packed):
    _, dst = packed
    ds = ShardDataset(dst, seed=3, shuffle_buffer=16)
    ds.set_epoch(2)
    batches = [[s["__key__"] for s in b]
               for b in loader(ds, batch_size=4, num_workers=3)]
    for done in (1, 5, 8, len(batches) - 2, len(batches) - 1):
        ds2 = ShardDataset(dst, seed=3, shuffle_buffer=16)
        ds2.resume(2, sum(len(b) for b in batches[:done]), batch_size=4)
        rest = [[s["__key__"] for s in b]
                for b in loader(ds2, batch_size=4, num_workers=3)]
        assert rest == batches[done:]


@pytest.mark.parametrize("workers,batch,drop_last",
                         [(2, 7, False), (3, 7, False), (2, 7, True)])
def test_resume_after_every_batch(packed, workers, batch, drop_last):
    """F11: a resume right after a worker's short last batch continued
    one batch early (samples_seen // batch_size counted the short batch
    as none).  Every resume point of an epoch whose workers each end on
    a short batch must give the rest of the uninterrupted order."""
    tree, dst = packed
    ds = ShardDataset(dst, seed=5, shuffle_buffer=8)
    ds.set_epoch(1)
    kw = dict(batch_size=batch, num_workers=workers, drop_last=drop_last)
    batches = [[s["__key__"] for s in b] for b in loader(ds, **kw)]
    if not drop_last:
        assert sum(len(b) for b in batches) == len(tree)
        assert sum(len(b) < batch for b in batches) >= 2   # short ones
    for done in range(1, len(batches) + 1):
        ds2 = ShardDataset(dst, seed=5, shuffle_buffer=8)
        ds2.resume(1, sum(len(b) for b in batches[:done]), batch_size=batch,
                   drop_last=drop_last)
        rest = [[s["__key__"] for s in b] for b in loader(ds2, **kw)]
        assert rest == batches[done:], f"resumed after {done} batches"


def test_persistent_workers_follow_set_epoch(packed):
    _, dst = packed
    ds = ShardDataset(dst, seed=1)
    dl = loader(ds, batch_size=16, num_workers=2, persistent_workers=True)
    orders = []
    for epoch in (0, 1, 0):
        ds.set_epoch(epoch)
        orders.append([s["__key__"] for b in dl for s in b])
    assert orders[0] == orders[2] and orders[0] != orders[1]


def test_spawned_workers(packed):
    """The dataset pickles (no lambdas, shared epoch) for spawn too."""
    tree, dst = packed
    ds = ShardDataset(dst, seed=8, decode=True)
    ds.set_epoch(3)
    dl = loader(ds, batch_size=32, num_workers=2,
                multiprocessing_context="spawn")
    keys = [s["__key__"] for b in dl for s in b]
    assert sorted(keys) == sorted(tree)
    assert keys == [s["__key__"] for b in loader(ds, batch_size=32,
                                                   num_workers=2)
                    for s in b]


def test_worker_positions():
    # Round-robin over 3 workers of 10, 10, 9 samples, batches of 4.
    assert tdata.worker_positions(0, 4, [10, 10, 9]) == ([0, 0, 0], 0)
    assert tdata.worker_positions(16, 4, [10, 10, 9]) == ([8, 4, 4], 1)
    assert tdata.worker_positions(36, 4, [10, 10, 9]) == ([10, 10, 9], 0)
    # Short last batches count what they held: after 8+8+8 (two rounds)
    # and 2 (worker 0's short one), worker 1's short batch is next.
    assert tdata.worker_positions(26, 4, [10, 10, 9]) == ([10, 8, 8], 1)
    assert tdata.worker_positions(28, 4, [10, 10, 9]) == ([10, 10, 8], 2)
    # drop_last: a worker with less than a batch left is done.
    assert tdata.worker_positions(24, 4, [10, 10, 9], True) == (
        [8, 8, 8], 0)


# ---- damage ----

def test_damaged_header_names_shard_and_offset(packed, tmp_path):
    tree, dst = packed
    bad = tmp_path / "bad"
    subprocess.run(["cp", "-r", dst, str(bad)], check=True)
    with tarfile.open(bad / "shard-000001.tar") as t:
        victim = t.getmembers()[2]
    with open(bad / "shard-000001.tar", "r+b") as f:
        f.seek(victim.offset + 3)
        b = f.read(1)
        f.seek(victim.offset + 3)
        f.write(bytes([b[0] ^ 0x20]))
    ds = ShardDataset(str(bad), shuffle=False)
    with pytest.raises(tierfs.TierfsError) as e:
        for _ in ds:
            pass
    assert f"shard-000001.tar at offset {victim.offset}" in str(e.value)
    assert "checksum mismatch" in str(e.value)


def test_truncated_shard(packed, tmp_path):
    _, dst = packed
    bad = tmp_path / "bad"
    subprocess.run(["cp", "-r", dst, str(bad)], check=True)
    size = os.path.getsize(bad / "shard-000002.tar")
    os.truncate(bad / "shard-000002.tar", size // 2)
    ds = ShardDataset(str(bad), shuffle=False)
    with pytest.raises(tierfs.TierfsError) as e:
        for _ in ds:
            pass
    assert f"shard-000002.tar is truncated at offset {size // 2}" in \
        str(e.value)


# ---- the CLI ----

def test_cli_refuses_and_resumes(tmp_path):
    src = tmp_path / "src"
    make_tree(str(src), n=30)
    (src / "train" / "c0" / "00000.JPG").write_bytes(b"x")
    r = pack(str(src), str(tmp_path / "d"), check=False)
    assert r.returncode == 1
    assert "'jpg' twice" in r.stderr and "train/c0/00000" in r.stderr
    (src / "train" / "c0" / "00000.JPG").unlink()
    (src / "notes").write_text("no extension")
    r = pack(str(src), str(tmp_path / "d"), check=False)
    assert r.returncode == 1 and "'notes': not KEY.FIELD" in r.stderr
    (src / "notes").unlink()
    r = pack(str(src), str(tmp_path / "d"), "--shard-size", "20K")
    assert "0 kept" in r.stderr
    os.unlink(tmp_path / "d" / "shard-000001.tar")
    r = pack(str(src), str(tmp_path / "d"), "--shard-size", "20K")
    m = re.search(r"\((\d+) shards, (\d+) kept", r.stderr)
    assert int(m.group(2)) == int(m.group(1)) - 1
    r = subprocess.run([TIERFS, "pack", str(src)], capture_output=True,
                       text=True)
    assert r.returncode == 2


# ---- over the local Ceph RGW ----

@pytest.fixture(scope="module")
def packed_s3(tmp_path_factory):
    assert S3, "TFS_TEST_S3_URI is not set (run under scripts/with-s3)"
    top = tmp_path_factory.mktemp("pack-s3")
    tree = make_tree(str(top / "src"), n=200, seed=2)
    uri = f"{S3}/pack-{uuid.uuid4().hex[:8]}"
    pack(str(top / "src"), uri, "--shard-size", "96K", "-j", "8")
    yield tree, uri
    bucket, prefix = S3, uri[len(S3) + 1:]
    with tierfs.Store(bucket) as st:
        for key, stat in list(st.list(prefix + "/")):
            if stat is not None:
                st.remove(key)


def test_dataloader_4_workers_over_s3(packed_s3, tmp_path):
    tree, uri = packed_s3
    ds = ShardDataset(uri, seed=6, cache_dir=str(tmp_path / "cache"),
                      cache_options={"cache_size": "64M"})
    crc = {}
    for batch in loader(ds, batch_size=16, num_workers=4):
        for s in batch:
            crc[s["__key__"]] = zlib.crc32(s["jpg"])
            assert s["cls"] == tree[s["__key__"]]["cls"]
    assert len(crc) == len(tree)
    assert all(crc[k] == zlib.crc32(tree[k]["jpg"]) for k in tree)
    stats = ds.cache_stats()
    assert stats["read_bytes"] > 0 and stats["backend_get_count"] > 0


# ---- the stall meter ----

def test_stall_meter(packed, capsys):
    _, dst = packed
    ds = ShardDataset(dst, seed=1)
    meter = StallMeter(loader(ds, batch_size=10, num_workers=2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # the workers' start-up may
        meter.run(lambda batch: time.sleep(0.06), epochs=2)  # pass 20%
    out = capsys.readouterr().out
    assert out.count("after the first batch") == 2
    assert "cache hit rate" in out
    e = meter.epochs[1]
    assert e["steps"] == 16 and e["samples"] == 150     # 2 x (7x10 + 5)
    assert e["compute_s"] >= 16 * 0.06
    assert e["stall_after_first"] < 0.2 and e["stall"] > 0
    assert e["hit_rate"] is not None
    assert len(meter.steps) == 32
    assert "wait_ms" in meter.report()


def test_stall_meter_warns_on_a_slow_store(packed):
    _, dst = packed
    ds = ShardDataset("fault+file://" + dst + "?latency_ms=30", seed=1,
                      prefetch=0, shuffle_buffer=1,
                      cache_options={"block_size": "64K"})
    meter = StallMeter(loader(ds, batch_size=50), log=None)
    with pytest.warns(RuntimeWarning, match="data stall"):
        for _ in meter.epoch(0):
            pass
    assert meter.epochs[0]["stall"] > 0.2
