"""`kiln compile --tune-trials N --records FILE` tunes and writes records; a later compile reuses them."""
from __future__ import annotations

from cli.main import main


def test_cli_tunes_then_reuses_records(tmp_path, tiny_model, capsys, monkeypatch):
    model = tmp_path / "tiny.onnx"
    model.write_bytes(tiny_model)
    records = tmp_path / "records.jsonl"
    monkeypatch.setenv("KILN_RECORDS", str(tmp_path / "default.jsonl"))
    assert main(["compile", str(model), "--tune-trials", "4", "--records", str(records), "-o", str(tmp_path / "a.tar.gz")]) == 0
    out = capsys.readouterr().out
    assert "tuning: 4 new trials" in out and records.read_text().count("\n") == 4
    assert main(["compile", str(model), "--records", str(records), "-o", str(tmp_path / "b.tar.gz")]) == 0
    assert "4 from records; 2 of 2 tasks reused their records without measuring" in capsys.readouterr().out
    assert records.read_text().count("\n") == 4
    assert main(["compile", str(model), "--tune-trials", "-1", "-o", str(tmp_path / "c.tar.gz")]) == 2
    assert not (tmp_path / "default.jsonl").exists()
