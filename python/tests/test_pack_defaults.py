# SPDX-License-Identifier: MIT
"""ShardDataset's defaults agree with its RAM tier (issue 17 item 6).

A shard set of 48 KiB samples, where the old fixed shuffle buffer of 1000
slots needed about 327 MiB against the default 128M RAM tier and every
loader worker warned every epoch.  Each case runs the loader in a child
interpreter, with warnings shown every time they are raised
(simplefilter("always"), inherited by the forked workers), and counts
the warnings on its stderr: the Python RuntimeWarning and the C
reader's log line both say "RAM tier".

Environment (set by tests/tests.cmake): TFS_TEST_BIN, TIERFS_LIB.
"""
import os
import random
import subprocess
import sys
import textwrap

import pytest

from tierfs import data as tdata

TIERFS = os.environ.get("TFS_TEST_BIN", "tierfs")
N = 600
SAMPLE = 48 << 10


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    top = tmp_path_factory.mktemp("defaults")
    rng = random.Random(5)
    src = top / "src"
    for i in range(N):
        d = src / f"c{i % 4}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{i:05d}.bin").write_bytes(rng.randbytes(SAMPLE))
        (d / f"{i:05d}.cls").write_bytes(str(i % 4).encode())
    dst = str(top / "dst")
    subprocess.run([TIERFS, "pack", "-q", "--shard-size", "4M",
                    "--shuffle-seed", "3", str(src), dst],
                   check=True, capture_output=True)
    return dst


SCRIPT = textwrap.dedent("""
    import sys, warnings
    warnings.simplefilter("always")
    from torch.utils.data import DataLoader
    from tierfs.torch import ShardDataset
    dst, workers, copts = sys.argv[1], int(sys.argv[2]), eval(sys.argv[3])
    ds = ShardDataset(dst, seed=1, cache_options=copts)
    dl = DataLoader(ds, batch_size=32, num_workers=workers,
                    collate_fn=lambda b: [s["__key__"] for s in b])
    for epoch in range(2):
        ds.set_epoch(epoch)
        keys = [k for b in dl for k in b]
        assert len(keys) == len(set(keys)) == len(ds), len(keys)
        print("epoch", epoch, len(keys), flush=True)
""")


def run_loader(dst, workers, copts=None):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, "-c", SCRIPT, dst, str(workers),
                        repr(copts or {})], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("epoch ") == 2, r.stdout
    return [ln for ln in r.stderr.splitlines() if "RAM tier" in ln]


def test_defaults_fit_the_ram_tier(shards):
    """The defaults are sized from mem_cache: the stream fits it, with a
    buffer below the old 1000 for these samples; an explicit buffer is
    used as given."""
    ds = tdata.PackedDataset(shards, cache_options={"mem_cache": "128M",
                                                    "immutable": 1})
    try:
        it = ds.iterator()
        need = it.ram_need()
        assert need <= 128 << 20
        it.close()
        old = ds.iterator(shuffle_buffer=1000, prefetch_bytes=32 << 20)
        assert old.ram_need() > 128 << 20       # the old defaults: not
        old.close()
    finally:
        ds.close()


def test_no_warning_with_defaults(shards):
    assert run_loader(shards, 2) == []


@pytest.mark.parametrize("workers", [0, 2])
def test_small_ram_tier_warns_once(shards, workers):
    """A RAM tier too small for even 16 slots: one warning for the whole
    training process, over 2 epochs (the workers are forked again for the
    second) and 2 workers; not a second one from the C reader."""
    lines = run_loader(shards, workers, {"mem_cache": "8M"})
    assert len(lines) == 1, lines
    assert "RuntimeWarning" in lines[0]
