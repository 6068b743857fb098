"""``gsnb fetch``: downloads from a local HTTP server (127.0.0.1), resumes, checks, copies."""

from __future__ import annotations

import hashlib
import http.server
import io
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gsnb import cli
from gsnb.data import download
from gsnb.data.samples import SAMPLES, Sample

FILES = {"transforms.json": b'{"frames": []}' * 50, "images/0001.jpg": bytes(range(256)) * 400}


class _Server(http.server.ThreadingHTTPServer):
    ranges: list[str | None]
    honour_range: bool
    files: dict[str, bytes]


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        body = self.server.files.get(self.path.lstrip("/"))
        asked = self.headers.get("Range")
        self.server.ranges.append(asked)
        if body is None:
            self.send_error(404)
            return
        start = int(asked.split("=")[1].rstrip("-")) if asked and self.server.honour_range else 0
        self.send_response(206 if start else 200)
        self.send_header("Content-Length", str(len(body) - start))
        self.end_headers()
        self.wfile.write(body[start:])

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[_Server]:
    httpd = _Server(("127.0.0.1", 0), _Handler)
    httpd.files, httpd.ranges, httpd.honour_range = dict(FILES), [], True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def sample(server: _Server, monkeypatch: pytest.MonkeyPatch) -> Sample:
    files = tuple((p, len(b), hashlib.sha256(b).hexdigest()) for p, b in FILES.items())
    tiny = Sample(
        "tiny", "a test sample", "test only", f"http://127.0.0.1:{server.server_port}", files
    )
    monkeypatch.setitem(SAMPLES, "tiny", tiny)
    monkeypatch.delenv("GSNB_FETCH_FROM", raising=False)
    return tiny


def test_download_checks_every_file_and_marks_the_sample_whole(sample, server, tmp_path) -> None:
    path = download.fetch("tiny", folder=tmp_path / "tiny", progress=False)
    assert {p: (path / p).read_bytes() for p in FILES} == FILES
    assert (path / download.DONE).is_file() and "test only" in (path / "SOURCE.md").read_text()
    requests = len(server.ranges)
    assert download.fetch("tiny", folder=path, progress=False) == path
    assert len(server.ranges) == requests  # whole already: nothing asked again


def test_an_interrupted_download_resumes_with_a_range_request(sample, server, tmp_path) -> None:
    folder = tmp_path / "tiny"
    part = folder / "images" / "0001.jpg.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(FILES["images/0001.jpg"][:1000])  # what a killed fetch left
    download.fetch("tiny", folder=folder, progress=False)
    assert "bytes=1000-" in server.ranges
    assert (folder / "images" / "0001.jpg").read_bytes() == FILES["images/0001.jpg"]
    assert not part.exists()


def test_a_server_without_ranges_sends_the_whole_file_again(sample, server, tmp_path) -> None:
    server.honour_range = False
    folder = tmp_path / "tiny"
    (folder / "images").mkdir(parents=True)
    (folder / "images" / "0001.jpg.part").write_bytes(FILES["images/0001.jpg"][:1000])
    download.fetch("tiny", folder=folder, progress=False)
    assert (folder / "images" / "0001.jpg").read_bytes() == FILES["images/0001.jpg"]


def test_a_changed_file_is_refused_and_removed(sample, server, tmp_path) -> None:
    server.files["transforms.json"] = b"something else"
    with pytest.raises(download.FetchError, match=r"transforms.json .* not the expected file"):
        download.fetch("tiny", folder=tmp_path / "tiny", progress=False)
    assert not (tmp_path / "tiny" / "transforms.json").exists()
    assert not (tmp_path / "tiny" / download.DONE).exists()


def test_no_network_says_how_to_resume_or_use_a_copy(sample, server, tmp_path, capsys) -> None:
    server.files.clear()
    code = cli.main(["fetch", "tiny", "--dir", str(tmp_path / "t"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1 and "could not download" in err and "gsnb fetch tiny --from" in err


def test_a_copy_that_does_not_exist_is_refused_even_when_nothing_is_missing(
    sample, server, tmp_path
) -> None:
    download.fetch("tiny", folder=tmp_path / "t", progress=False)
    with pytest.raises(download.FetchError, match=r"nowhere does not exist"):
        download.fetch("tiny", folder=tmp_path / "t", source=tmp_path / "nowhere", progress=False)


def _copy_tree(root: Path) -> Path:
    for path, body in FILES.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(body)
    return root


@pytest.mark.parametrize("kind", ["folder", "zip", "tar.gz"])
def test_a_copy_the_user_has_serves_without_a_network(sample, server, tmp_path, kind) -> None:
    tree = _copy_tree(tmp_path / "mine" / "tiny")
    source: Path = tree
    if kind == "zip":
        source = tmp_path / "tiny.zip"
        with zipfile.ZipFile(source, "w") as archive:
            for p in FILES:
                archive.write(tree / p, f"tiny/{p}")
    elif kind == "tar.gz":
        source = tmp_path / "tiny.tar.gz"
        with tarfile.open(source, "w:gz") as archive:
            archive.add(tree, arcname="tiny")
    path = download.fetch("tiny", folder=tmp_path / "cache", source=source, progress=False)
    assert (path / "images" / "0001.jpg").read_bytes() == FILES["images/0001.jpg"]
    assert server.ranges == []


def test_the_environment_names_a_folder_of_copies(sample, server, tmp_path, monkeypatch) -> None:
    _copy_tree(tmp_path / "samples" / "tiny")
    monkeypatch.setenv("GSNB_FETCH_FROM", str(tmp_path / "samples"))
    download.fetch("tiny", folder=tmp_path / "cache", progress=False)
    assert server.ranges == []


def test_a_damaged_copy_and_an_escaping_archive_are_refused(sample, tmp_path) -> None:
    tree = _copy_tree(tmp_path / "mine")
    (tree / "transforms.json").write_bytes(b"damaged")
    with pytest.raises(download.FetchError, match="not the expected file"):
        download.fetch("tiny", folder=tmp_path / "c1", source=tree, progress=False)
    evil = tmp_path / "evil.tar"
    with tarfile.open(evil, "w") as archive:
        info = tarfile.TarInfo("../outside.txt")
        info.size = 2
        archive.addfile(info, io.BytesIO(b"hi"))
    with pytest.raises(download.FetchError, match="outside its folder"):
        download.fetch("tiny", folder=tmp_path / "c2", source=evil, progress=False)
    assert not (tmp_path / "outside.txt").exists()


def test_unknown_sample_names_the_known_ones(tmp_path) -> None:
    with pytest.raises(download.FetchError, match="knows: fox"):
        download.fetch("elephant", folder=tmp_path)


def test_the_fox_registry_matches_the_fox_capture(fox: Path, tmp_path) -> None:
    """Every registered file of the fox, checked against the capture beside the checkout."""
    path = download.fetch("fox", folder=tmp_path / "fox", source=fox, progress=False)
    assert len(list((path / "images").iterdir())) == 67
    from gsnb.data import load_dataset

    assert len(load_dataset(path, downscale=8).views) == 67


def test_an_unwritable_folder_is_one_clear_line(sample, tmp_path, capsys) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code = cli.main(["fetch", "tiny", "--dir", str(blocker / "tiny"), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 1 and err.startswith("gsnb fetch: error: cannot write into")
    assert len(err.splitlines()) == 1
