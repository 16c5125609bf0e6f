# SPDX-License-Identifier: MIT
"""The Python binding of the store layer, on a posix store (and on the
local S3 server when TFS_TEST_S3_URI is set)."""
import errno
import os

import pytest

import tierfs


@pytest.fixture(params=["posix", "s3"])
def store(request, tmp_path):
    if request.param == "posix":
        uri = str(tmp_path)
    else:
        uri = os.environ.get("TFS_TEST_S3_URI")
        if not uri:
            pytest.fail("TFS_TEST_S3_URI is not set: run under "
                        "scripts/with-s3 (ctest does)")
        uri = f"{uri}/py-{os.getpid()}"
    with tierfs.Store(uri) as st:
        yield st
        for key, _ in list(st.list("")):
            st.remove(key)


def test_version():
    assert tierfs.version().count(".") == 2


def test_put_read_stat(store):
    st = store.put("dir/obj.bin", b"0123456789")
    assert st.size == 10
    assert store.read("dir/obj.bin") == b"0123456789"
    assert store.read("dir/obj.bin", offset=3, length=4) == b"3456"
    assert store.read("dir/obj.bin", offset=10, length=4) == b""
    assert store.stat("dir/obj.bin").version == st.version


def test_if_version(store):
    old = store.put("v", b"one")
    store.put("v", b"two!")
    with pytest.raises(tierfs.TierfsError) as e:
        store.read("v", length=3, if_version=old.version)
    assert e.value.errno == errno.ESTALE


def test_missing_key_raises_enoent(store):
    with pytest.raises(tierfs.TierfsError) as e:
        store.stat("no/such/key")
    assert e.value.errno == errno.ENOENT
    assert e.value.rc == -errno.ENOENT


def test_list_and_remove(store):
    for name in ("a/1", "a/2", "a/b/3", "c"):
        store.put(name, name.encode())
    assert [k for k, _ in store.list("a/")] == ["a/1", "a/2", "a/b/3"]
    top = list(store.list("", "/"))
    assert ("a/", None) in top
    assert [k for k, s in top if s is not None] == ["c"]
    store.remove("a/1")
    assert [k for k, _ in store.list("a/")] == ["a/2", "a/b/3"]


def test_put_file(store, tmp_path):
    src = tmp_path / "src.bin"
    data = os.urandom(300000)
    src.write_bytes(data)
    store.put_file("f.bin", str(src))
    assert store.read("f.bin") == data


def test_bad_uri():
    with pytest.raises(tierfs.TierfsError) as e:
        tierfs.Store("nope://x")
    assert "nope" in str(e.value)
