"""``mixzoo mix`` (mixzoo/cli/mixing.py): the files it names, and the method's fit summary in its table."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from mixzoo.cli import app
from mixzoo.cli.mixing import card_files
from mixzoo.core.card import ARRAYS_SUFFIX, MixCard
from mixzoo.methods import FitResult, get_method


def test_mix_names_the_card_and_its_arrays_file_copy_both(tmp_path):
    out = tmp_path / "card.toml"
    args = ["mix", "--abc", "digits-std", "--rbc", "digits-pgd", "--n-calib", "120", "--n-iter", "8",
            "--n-target-classes", "2", "--batch-size", "60", "--out", str(out), "--cache-dir", str(tmp_path / "c")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    sidecar = out.with_name(f"card{ARRAYS_SUFFIX}")
    card = MixCard.load(out)
    assert sidecar.is_file() and card_files(out, card) == [out, sidecar]
    said = " ".join(result.stdout.split())
    assert f"mix card written to {out}, with {sidecar.name} beside it;" in said and "copy both together" in said
    sidecar.unlink()
    assert card_files(out, card) == [out, sidecar]  # what the card references, present or not


def test_a_card_with_weight_files_names_them_all(tmp_path):
    from mixzoo.cli.mixing import written_message

    card = MixCard("linear", {"alpha": 0.9, "temperature": 1.0, "fit": "given"}, abc={"name": "a"},
                   rbc={"name": "b"}, dataset="digits")
    card.weights = {"net.mixing-network.safetensors": "0" * 64}
    path = tmp_path / "net.toml"
    path.write_text("")
    assert written_message(path, card) == (f"mix card written to {path}, with net.mixing-network.safetensors beside"
                                           " it; loading the card reads both, so copy both together")
    card.weights["net.other.safetensors"] = "1" * 64
    assert ", with net.mixing-network.safetensors and net.other.safetensors beside it; loading the card reads them " \
           "all, so copy them all together" in written_message(path, card)


def test_a_card_without_companions_is_named_alone(tmp_path):
    from mixzoo.cli.mixing import written_message

    card = MixCard("linear", {"alpha": 0.9, "temperature": 1.0, "fit": "given"}, abc={"name": "a"},
                   rbc={"name": "b"}, dataset="digits")
    path = card.save(tmp_path / "lin.toml")
    assert written_message(path, card) == f"mix card written to {path}"
    assert written_message(Path("card.toml"), card) == "mix card written to card.toml"  # not written (a spy's)


def test_the_fit_summary_reaches_the_table_beside_the_parameters():
    card = MixCard("linear", {"alpha": 0.9, "temperature": 1.0, "fit": "given"}, abc={"name": "a"},
                   rbc={"name": "b"}, dataset="digits")
    rows = dict(get_method("linear").fit_summary(FitResult(card, None, {"alpha": 0.9, "val_clean": 0.8125,
                                                                        "epochs": 3, "history": [1, 2]},
                                                           {"train": 2.0, "search": 1.5})))
    assert rows["val_clean"] == "0.8125" and rows["epochs"] == "3" and "history" not in rows
    assert rows["alpha"] == "0.9" and rows["seconds"] == "3.5"  # the steps' seconds summed when none is the total
