import hashlib
import pathlib

import pytest

from dpjax.data import ENV_VAR, DatasetNotFoundError, data_dir, download, load_mnist, sha256_file


def test_data_dir_resolution_order(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert data_dir() == tmp_path / "xdg" / "dpjax"
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "env"))
    assert data_dir() == tmp_path / "env"
    assert data_dir(tmp_path / "arg") == tmp_path / "arg"
    assert data_dir(str(tmp_path)) == tmp_path


def test_data_dir_home_fallback(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert data_dir() == pathlib.Path.home() / ".cache" / "dpjax"


def test_data_dir_rejects_bad_argument():
    with pytest.raises(ValueError, match="path="):
        data_dir(3)
    with pytest.raises(ValueError, match="path="):
        data_dir("")


def test_download_file_url_atomic_and_checksummed(tmp_path):
    src = tmp_path / "src.bin"
    payload = b"dpjax" * 1000
    src.write_bytes(payload)
    digest = hashlib.sha256(payload).hexdigest()
    dest = tmp_path / "out" / "copy.bin"
    got = download(src.as_uri(), dest, digest)
    assert got == dest and dest.read_bytes() == payload
    assert sha256_file(dest) == digest
    # an existing file is kept and verified
    assert download(src.as_uri(), dest, digest) == dest
    # a wrong checksum leaves nothing behind
    bad = tmp_path / "out" / "bad.bin"
    with pytest.raises(ValueError, match="checksum mismatch"):
        download(src.as_uri(), bad, "0" * 64)
    assert not bad.exists()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["copy.bin"]


def test_download_validates_arguments(tmp_path):
    with pytest.raises(ValueError, match="sha256="):
        download("file:///nonexistent", tmp_path / "x", "abc")
    with pytest.raises(ValueError, match="url="):
        download("", tmp_path / "x")


def test_download_missing_source_raises_and_leaves_no_temp(tmp_path):
    with pytest.raises(OSError):
        download((tmp_path / "missing.bin").as_uri(), tmp_path / "dst" / "x.bin")
    assert list((tmp_path / "dst").iterdir()) == []


def test_not_found_error_message_is_actionable(tmp_path):
    with pytest.raises(DatasetNotFoundError) as info:
        load_mnist(tmp_path, source="files")
    msg = str(info.value)
    assert str(tmp_path) in msg
    assert "mnist.npz" in msg and "train-images-idx3-ubyte" in msg
    assert ENV_VAR in msg and "download_mnist" in msg
    assert isinstance(info.value, FileNotFoundError)
