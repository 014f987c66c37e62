"""Share, deploy, submit: the Hub folder and its model card, loading by ``hf-hub:`` id from a locally built Hugging
Face cache (offline, as the timm path is tested), ONNX / torch.export artifacts checked against mixzoo's outputs
with the real runtimes, and RobustBench's model_info JSON from real bench reports. Cards: a MixedNUTS card of the
digits pair (fitted in seconds) and the shipped adaptive-smoothing card ``fmnist-adaptive-smoothing-a``."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hub_cache import put_hf_file
from typer.testing import CliRunner

import mixzoo
from mixzoo.cli import app
from mixzoo.core.card import MixCard
from mixzoo.core.errors import InputError, MissingFileError, MixzooError
from mixzoo.evaluation.bench import bench
from mixzoo.share import export as share_export
from mixzoo.share import push as share_push
from mixzoo.share import robustbench as rb
from mixzoo.zoo.data import load_dataset

AS_CARD = "fmnist-adaptive-smoothing-a"
REPO = "someone/mixed"
# adaptive-strong at toy strength: every component runs (autoattack-standard included), in seconds on digits
STRONG = dict(attack="adaptive-strong", attack_options={"n_iter": 5, "n_queries": 50, "n_target_classes": 2},
              baseline=None, curve=None, plots=False, extra_attacks=False, progress=False)

# RobustBench/robustbench at 78fcc9e48a07a861268f295a777b975f25155964, model_info/cifar10/Linf/: the key sets of three
# real files (test data, read from the repository; the PyPI package does not ship them)
ROBUSTBENCH_EXAMPLES = {
    "Bai2024MixedNUTS.json": {"link", "name", "authors", "additional_data", "number_forward_passes", "dataset",
                              "venue", "architecture", "eps", "clean_acc", "reported", "autoattack_acc", "external",
                              "footnote", "unreliable"},
    "Bai2023Improving_edm.json": {"link", "name", "authors", "additional_data", "number_forward_passes", "dataset",
                                  "venue", "architecture", "eps", "clean_acc", "reported", "autoattack_acc",
                                  "footnote", "unreliable"},
    "Carmon2019Unlabeled.json": {"link", "name", "authors", "additional_data", "number_forward_passes", "dataset",
                                 "venue", "architecture", "eps", "clean_acc", "reported", "autoattack_acc",
                                 "unreliable"},
}
# value types there: accuracies and eps are strings ("95.19", "8/255"), number_forward_passes an int, flags bools
ROBUSTBENCH_TYPES = {"link": str, "name": str, "authors": str, "additional_data": bool, "number_forward_passes": int,
                     "dataset": str, "venue": str, "architecture": str, "eps": str, "clean_acc": str, "reported": str,
                     "autoattack_acc": str, "external": str, "footnote": str, "unreliable": bool}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def hub_from_folder(cache: Path, folder: Path, repo: str = REPO) -> None:
    """Put every file of a pushed folder into the Hugging Face cache layout, as a download would."""
    for f in folder.rglob("*"):
        if f.is_file():
            put_hf_file(cache, repo, str(f.relative_to(folder)), f.read_bytes())


@pytest.fixture(scope="module")
def threads():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def strong_report(digits_card, tmp_path_factory, threads):
    """A real adaptive-strong bench report of the digits MixedNUTS card (40 images)."""
    out = tmp_path_factory.mktemp("bench") / "bench"
    bench(digits_card, n=40, out=out, batch_size=40, cache_dir=out.parent / "cache", **STRONG)
    return out


# -------------------------------------------------------------------------------------------------------- push
@pytest.mark.parametrize("bundle", [False, True])
def test_push_dry_run_writes_a_hub_folder_with_model_card(digits_card, strong_report, tmp_path, bundle, threads):
    from huggingface_hub import metadata_load
    from huggingface_hub.repocard import ModelCard

    card = MixCard.load(digits_card)
    res = share_push.push(digits_card, REPO, out=tmp_path / "hub", bundle_weights=bundle, report=strong_report,
                          dry_run=True)
    folder = res.folder.path
    assert res.url is None and folder == tmp_path / "hub"
    assert MixCard.load(folder / "card.toml").params == card.params
    refs = json.loads((folder / "base_models.json").read_text())
    for role, name in (("abc", "digits-std"), ("rbc", "digits-pgd")):
        assert refs[role]["name"] == name and refs[role]["weight_hash"] == getattr(card, role)["weight_hash"]
        assert refs[role]["file_sha256"] == mixzoo.get_spec(name).sha256
        if bundle:
            file = folder / refs[role]["file"]
            assert refs[role]["sha256"] == sha256(file)
            from safetensors.torch import load_file

            net = mixzoo.load_model(name).network.state_dict()
            saved = load_file(str(file))
            assert saved.keys() == net.keys() and all(torch.equal(saved[k], net[k]) for k in net)
        else:
            assert "file" not in refs[role] and not (folder / f"{role}.safetensors").exists()
    meta = metadata_load(folder / "README.md")  # huggingface_hub's own parser of the YAML header
    assert meta["library_name"] == "mixzoo" and meta["datasets"] == ["digits"]
    assert meta["mixzoo"] == {"method": "mixednuts", "abc": "digits-std", "rbc": "digits-pgd", "card": "card.toml"}
    assert "base_model" not in meta and "mixednuts" in meta["tags"]  # the zoo's models are not Hub repositories
    assert meta["metrics"] == ["accuracy"]
    report = json.loads((strong_report / "report.json").read_text())
    row = next(m for m in report["models"] if m["kind"] == "mixednuts")
    results = ModelCard.load(folder / "README.md").data.eval_results
    assert {r.metric_name: r.metric_value for r in results} == {
        "clean accuracy": round(100 * row["clean_accuracy"], 2),
        "robust accuracy (adaptive-strong, Linf eps 0.2 (51/255))": round(100 * row["robust_accuracy"], 2)}
    text = (folder / "README.md").read_text()
    assert "bench/report.json" in text and f"{100 * row['robust_accuracy']:.2f}" in text
    assert "the extra attacks the method declares were not run" in text  # the bench ran with extra_attacks=False
    assert json.loads((folder / "bench" / "report.json").read_text()) == report
    assert (folder / "bench" / "report.md").is_file()


def test_model_card_names_hub_hosted_base_models_as_base_model(digits_card):
    from huggingface_hub.repocard import ModelCard

    card = MixCard.load(digits_card)
    atto = "timm/convnextv2_atto.fcmae_ft_in1k"
    refs = {"abc": {"name": f"hf-hub:{atto}", "hub_id": atto}, "rbc": {"name": "digits-pgd", "hub_id": None}}
    meta = ModelCard(share_push.model_card(card, REPO, refs, None, None)).data.to_dict()
    assert meta["base_model"] == [atto] and meta["mixzoo"]["abc"] == f"hf-hub:{atto}"


def test_push_finds_the_latest_report_of_the_card_and_ignores_others(digits_card, strong_report, tmp_path):
    import shutil

    card = MixCard.load(digits_card).save_as(tmp_path / "c.toml")
    shutil.copytree(strong_report, tmp_path / "runs" / "b1")
    other = json.loads((strong_report / "report.json").read_text())
    for m in other["models"]:
        if m.get("card"):
            m["card"]["mixednuts"]["alpha"] = 0.5  # another card's report
    (tmp_path / "runs" / "b2").mkdir()
    (tmp_path / "runs" / "b2" / "report.json").write_text(json.dumps({**other, "run": {"created": "2999"}}))
    folder = share_push.hub_folder(card, REPO, tmp_path / "hub")
    assert folder.report == (tmp_path / "runs" / "b1" / "report.json").resolve()
    with pytest.raises(InputError, match="no row for this card"):
        share_push.hub_folder(card, REPO, tmp_path / "hub2", report=tmp_path / "runs" / "b2")
    assert not (tmp_path / "hub2").exists()


def test_push_refuses_bad_targets_and_leaves_nothing(digits_card, tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("x")
    with pytest.raises(InputError, match="not written by `mixzoo push`"):
        share_push.hub_folder(digits_card, REPO, tmp_path / "mine")
    with pytest.raises(InputError, match="hf-hub:ORG/NAME"):
        share_push.hub_folder(digits_card, "no-slash", tmp_path / "x")
    card = MixCard.load(digits_card)
    card.abc = {**card.abc, "weight_hash": "0" * 16}
    card.save(tmp_path / "wrong.toml")
    with pytest.raises(InputError, match="bundle only the weights the card was fitted for"):
        share_push.hub_folder(tmp_path / "wrong.toml", REPO, tmp_path / "y", bundle_weights=True)
    # no folder, no staging left (wrong.arrays.json: the card's search grid, written beside it)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine", "wrong.arrays.json", "wrong.toml"]
    first = share_push.hub_folder(digits_card, REPO, tmp_path / "z")  # a folder push wrote is replaced
    assert share_push.hub_folder(digits_card, REPO, first.path).files == first.files


class _RefusingHub:
    """A local HTTP server standing for a Hub that answers but refuses the upload (401 on every POST)."""

    def __enter__(self) -> str:
        import http.server
        import threading

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_HEAD(self):  # noqa: N802 - http.server's names
                self.send_response(200)
                self.end_headers()

            def do_POST(self):  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = b'{"error": "Invalid credentials in Authorization header"}'
                self.send_response(401)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_upload_fails_in_one_line_offline_unreachable_or_refused(digits_card, tmp_path, monkeypatch, hf_cache):
    from huggingface_hub import constants

    folder = share_push.hub_folder(digits_card, REPO, tmp_path / "hub")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(MixzooError, match="HF_HUB_OFFLINE") as err:
        share_push.upload(folder)
    assert str(folder.path) in str(err.value) and "\n" not in str(err.value)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("MIXZOO_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    with pytest.raises(MixzooError, match="127.0.0.1:9 is unreachable") as err:
        share_push.upload(folder, token="hf_x")
    with pytest.raises(MissingFileError, match="unreachable"):
        mixzoo.load_mixed("hf-hub:someone/elsewhere")
    with _RefusingHub() as endpoint:  # the real client talks to a server that says no
        monkeypatch.setattr(constants, "ENDPOINT", endpoint)
        with pytest.raises(MixzooError, match="upload of .* to someone/mixed failed.*401") as err:
            share_push.upload(folder, token="hf_x")
    assert "\n" not in str(err.value)


def test_cli_push_dry_run_and_offline_upload(digits_card, tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    runner = CliRunner()
    res = runner.invoke(app, ["push", str(digits_card), "--repo", REPO, "--dry-run", "--out", str(tmp_path / "h"),
                              "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert summary["uploaded"] is None and {"README.md", "card.toml", "base_models.json"} <= set(summary["files"])
    res = runner.invoke(app, ["push", str(digits_card), "--repo", REPO, "--out", str(tmp_path / "h")])
    assert res.exit_code == 2 and "HF_HUB_OFFLINE" in res.stderr and len(res.stderr.strip().splitlines()) == 1


# ------------------------------------------------------------------------------------------------- hf-hub loading
@pytest.mark.parametrize("which", ["mixednuts", "adaptive-smoothing"])
def test_load_mixed_by_hf_hub_id_from_the_cache(which, digits_card, hf_cache, tmp_path, threads):
    card = digits_card if which == "mixednuts" else AS_CARD
    folder = share_push.hub_folder(card, REPO, tmp_path / "hub").path
    hub_from_folder(hf_cache, folder)
    hub = mixzoo.load_mixed(f"hf-hub:{REPO}")
    local = mixzoo.load_mixed(card)
    data = load_dataset("digits" if which == "mixednuts" else "fashion-mnist", "evaluation", n=50)
    with torch.no_grad():
        assert torch.equal(hub(data.images), local(data.images))
    assert (hf_cache / f"models--{REPO.replace('/', '--')}") in Path(MixCard.load(f"hf-hub:{REPO}").path).parents


def test_hf_hub_missing_files_offline_are_one_line_errors(digits_card, hf_cache, tmp_path):
    with pytest.raises(MissingFileError, match="card.toml.*HF_HUB_OFFLINE") as err:
        mixzoo.load_mixed("hf-hub:someone/absent")
    assert str(hf_cache / "models--someone--absent") in str(err.value) and "\n" not in str(err.value)
    folder = share_push.hub_folder(AS_CARD, REPO, tmp_path / "hub").path
    (folder / "card.mixing-network.safetensors").unlink()
    hub_from_folder(hf_cache, folder)
    with pytest.raises(MissingFileError, match="card.mixing-network.safetensors"):
        mixzoo.load_mixed(f"hf-hub:{REPO}")
    with pytest.raises(InputError, match="hf-hub:ORG/NAME"):
        mixzoo.load_mixed("hf-hub:not-a-repo")


@pytest.mark.slow
def test_cli_bench_and_certify_take_hf_hub_ids(digits_card, hf_cache, tmp_path, threads):
    hub_from_folder(hf_cache, share_push.hub_folder(digits_card, REPO, tmp_path / "hub").path)
    runner = CliRunner()
    args = ["--n", "20", "--attack", "apgd", "-O", "n_iter=3", "--no-curve", "--no-baseline", "--no-plots",
            "--no-cache"]
    res = runner.invoke(app, ["bench", f"hf-hub:{REPO}", *args, "--out", str(tmp_path / "b"), "--json"])
    assert res.exit_code == 0, res.output
    by_id = json.loads((tmp_path / "b" / "report.json").read_text())
    res = runner.invoke(app, ["bench", str(digits_card), *args, "--out", str(tmp_path / "b2"), "--json"])
    local = json.loads((tmp_path / "b2" / "report.json").read_text())
    assert [(m["clean_outcomes"], m["robust_outcomes"]) for m in by_id["models"]] == \
        [(m["clean_outcomes"], m["robust_outcomes"]) for m in local["models"]]
    # certify: a constant-alpha card by id is certified; the MixedNUTS card by id is refused for its method
    lin = MixCard("linear", {"alpha": 0.8, "temperature": 1.0, "fit": "given"}, abc={"name": "digits-std"},
                  rbc={"name": "digits-pgd"}, dataset="digits").save(tmp_path / "lin.toml")
    hub_from_folder(hf_cache, share_push.hub_folder(lin, "someone/lin", tmp_path / "hub-lin").path, "someone/lin")
    res = runner.invoke(app, ["certify", "hf-hub:someone/lin", "--n", "10", "--out", str(tmp_path / "c")])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "c" / "certify.json").read_text())["settings"]["alphas"] == [1.0, 0.8]
    res = runner.invoke(app, ["certify", f"hf-hub:{REPO}", "--n", "10", "--out", str(tmp_path / "c2")])
    assert res.exit_code == 2 and "MixedNUTS cards have no certified radius" in res.stderr


# ---------------------------------------------------------------------------------------------------------- export
_RUN_WITHOUT_MIXZOO = """
import sys
sys.modules["mixzoo"] = None  # importing mixzoo now fails: the artifact must not need it
import numpy as np, torch
path, images, out = sys.argv[1:]
x = torch.from_numpy(np.load(images))
if path.endswith(".onnx"):
    import onnxruntime as ort
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    run = lambda b: session.run(["log_probs"], {"images": b.numpy()})[0]
else:
    module = torch.export.load(path).module()
    run = lambda b: module(b).detach().numpy()
with torch.no_grad():
    np.savez(out, **{str(n): run(x[:n]) for n in (100, 3, 1)})  # the batch size is free
"""


@pytest.mark.subprocess
@pytest.mark.parametrize("fmt", ["onnx", "torch-export"])
@pytest.mark.parametrize("which", ["mixednuts", "adaptive-smoothing"])
def test_export_runs_without_mixzoo_and_matches_on_100_images(fmt, which, digits_card, tmp_path, threads):
    if fmt == "onnx":
        pytest.importorskip("onnxruntime", reason="ONNX export needs the `export` extra (onnx, onnxruntime)")
    import numpy as np

    card = digits_card if which == "mixednuts" else AS_CARD
    res = share_export.export(card, fmt, tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [res.path.name]  # one file: weights inside, no staging left
    assert res.n_checked == 100 and res.max_scaled_diff <= 1e-5
    data = load_dataset("digits" if which == "mixednuts" else "fashion-mnist", "evaluation", n=100)
    with torch.no_grad():
        reference = mixzoo.load_mixed(card)(data.images)
    np.save(tmp_path.parent / "x.npy", data.images.numpy())
    subprocess.run([sys.executable, "-c", _RUN_WITHOUT_MIXZOO, str(res.path), str(tmp_path.parent / "x.npy"),
                    str(tmp_path.parent / "y.npz")], check=True, timeout=300)
    outputs = np.load(tmp_path.parent / "y.npz")
    for n in (100, 3, 1):
        got = torch.from_numpy(outputs[str(n)])
        assert got.shape == reference[:n].shape
        assert share_export.max_abs_diff(got, reference[:n], scaled=True) <= 1e-5
        assert share_export.max_abs_diff(got, reference[:n]) == pytest.approx(
            share_export.max_abs_diff(share_export.run_artifact(res.path, data.images[:n]), reference[:n]), abs=0)
    if fmt == "onnx":
        import onnx

        meta = {p.key: p.value for p in onnx.load(str(res.path)).metadata_props}
        assert meta["mixzoo.method"] == MixCard.load(card).method and meta["mixzoo.abc"] in ("digits-std",
                                                                                              "fmnist-std")


def test_export_refuses_what_cannot_be_one_artifact(tmp_path, digits_card):
    knn = MixCard("knn-smoothing", {"alpha": 1.0, "k": 5, "train": {"dataset": "digits", "n": 1000,
                                                                     "fingerprint": "x"}},
                  abc={"name": "digits-std"}, rbc={"name": "digits-pgd"}, dataset="digits")
    with pytest.raises(InputError, match="K-NN smoothing cards cannot be exported: its K-NN oracle searches the"
                                         " train split") as err:
        share_export.export(knn, "onnx", tmp_path)
    assert "\n" not in str(err.value)
    with pytest.raises(InputError, match="onnx or torch-export"):
        share_export.export(digits_card, "tflite", tmp_path)
    pytest.importorskip("onnxruntime", reason="ONNX export needs the `export` extra (onnx, onnxruntime)")
    with pytest.raises(MixzooError, match="differ from mixzoo's .* nothing was written"):
        share_export.export(digits_card, "onnx", tmp_path, tolerance=1e-12)  # rounding exists, so the check bites
    assert list(tmp_path.iterdir()) == []


def test_a_classifier_that_does_not_trace_is_refused_in_one_line(tmp_path, threads):
    card = MixCard("local-smoothing", {"alpha": 2.0, "r": "one"}, abc={"name": "digits-std"},
                   rbc={"name": "digits-pgd"}, dataset="digits").save(tmp_path / "ls.toml")
    for fmt in ("torch-export", "onnx") if _has_onnxruntime() else ("torch-export",):
        with pytest.raises(MixzooError, match="batch size") as err:
            share_export.export(card, fmt, tmp_path / "out")
        assert "\n" not in str(err.value) and "\x1b" not in str(err.value)
    assert not (tmp_path / "out").exists()  # a failed export leaves no empty folder behind


def _has_onnxruntime() -> bool:
    import importlib.util

    return importlib.util.find_spec("onnxruntime") is not None


def test_max_abs_diff_matches_infinities_exactly():
    inf = float("inf")

    def t(*v):
        return torch.tensor([v], dtype=torch.float64)

    a = t(0.0, -inf, -2.0)
    assert share_export.max_abs_diff(a, a.clone()) == 0.0
    assert share_export.max_abs_diff(a, t(0.0, -50.0, -2.0)) == inf
    assert share_export.max_abs_diff(a, t(0.0, inf, -2.0)) == inf
    assert share_export.max_abs_diff(a, t(1e-6, -inf, -2.0 - 4e-6)) == pytest.approx(4e-6)
    assert share_export.max_abs_diff(a, t(0.0, -inf, -2.0 - 3e-5), scaled=True) == pytest.approx(1e-5, rel=1e-4)
    assert share_export.max_abs_diff(a, t(float("nan"), -inf, -2.0)) != share_export.max_abs_diff(a, a)


def test_cli_export(digits_card, tmp_path, threads):
    res = CliRunner().invoke(app, ["export", str(digits_card), "--format", "torch-export", "--out", str(tmp_path),
                                   "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["path"].endswith("card.pt2") and out["n_checked"] == 100 and out["max_scaled_diff"] <= 1e-5
    res = CliRunner().invoke(app, ["export", str(digits_card), "--format", "tflite", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "onnx or torch-export" in res.stderr


def test_share_commands_import_heavy_packages_inside_the_commands_only():
    tree = ast.parse(Path(mixzoo.__file__).with_name("cli").joinpath("share.py").read_text())
    top = {n.module if isinstance(n, ast.ImportFrom) else a.name for n in tree.body
           if isinstance(n, ast.Import | ast.ImportFrom) for a in n.names}
    assert not {m for m in top if m and m.split(".")[0] in ("torch", "onnx", "onnxruntime", "huggingface_hub")}
    assert not {m for m in top if m and m.startswith("mixzoo.share.")}


# --------------------------------------------------------------------------------------------------- robustbench
def test_model_info_fields_are_robustbenchs():
    every = set.union(*ROBUSTBENCH_EXAMPLES.values())
    common = set.intersection(*ROBUSTBENCH_EXAMPLES.values())
    assert set(rb.MODEL_INFO_FIELDS) == every and common <= set(rb.MODEL_INFO_FIELDS)
    assert set(ROBUSTBENCH_TYPES) == every


def test_model_info_of_a_mixednuts_report(strong_report):
    info, where = rb.model_info(strong_report, fields={"link": "https://arxiv.org/abs/0000", "venue": "TMLR 2024"})
    assert list(info) == list(rb.MODEL_INFO_FIELDS)
    assert all(isinstance(info[k], t) for k, t in ROBUSTBENCH_TYPES.items())
    report = json.loads((strong_report / "report.json").read_text())
    row = next(m for m in report["models"] if m["kind"] == "mixednuts")
    comp = next(c for c in row["components"] if c["name"] == "autoattack-standard")
    clean = row["clean_outcomes"].count("1")
    assert info["clean_acc"] == f"{100 * clean / row['n']:.2f}"
    assert info["autoattack_acc"] == f"{100 * comp['own_outcomes'].count('1') / row['n']:.2f}"
    assert comp["own_broken"] == clean - comp["own_outcomes"].count("1") > 0  # the count, for people
    assert info["external"] == info["reported"] == f"{100 * row['robust_accuracy']:.2f}"
    assert float(info["external"]) <= float(info["autoattack_acc"])  # the worst case contains AutoAttack's breaks
    assert (info["number_forward_passes"], info["dataset"], info["eps"]) == (2, "digits", "51/255")
    assert info["architecture"] == "convnet + convnet" and info["venue"] == "TMLR 2024"
    assert where == {"dataset": "digits", "threat_model": "Linf"}


def test_autoattack_figure_is_a_users_own_autoattack_run(digits_card, strong_report, threads):
    """autoattack_acc equals what AutoAttack's standard evaluation, run by hand on the report's clean-correct
    images (one batch, seed 0, the bench's options), leaves robust."""
    from mixzoo.core.compat import import_autoattack

    report = json.loads((strong_report / "report.json").read_text())
    row = next(m for m in report["models"] if m["kind"] == "mixednuts")
    model = mixzoo.load_mixed(digits_card)
    data = load_dataset("digits", "evaluation", n=40)
    clean = torch.tensor([c == "1" for c in row["clean_outcomes"]])
    x, y = data.images[clean], data.labels[clean]
    opts = STRONG["attack_options"]
    aa = import_autoattack().AutoAttack(model, norm="Linf", eps=report["settings"]["eps"], seed=0, version="standard")
    aa.verbose = False
    for part in (aa.apgd, aa.apgd_targeted, aa.fab):
        part.n_iter = opts["n_iter"]
    aa.apgd_targeted.n_target_classes = aa.fab.n_target_classes = opts["n_target_classes"]
    aa.square.n_queries = opts["n_queries"]
    with torch.no_grad():
        adv = aa.run_standard_evaluation(x.clone(), y.clone(), bs=len(x))
        robust = int((model(adv).argmax(1) == y).sum())
    assert robust < len(x)  # AutoAttack breaks some, so the figure is not the clean accuracy
    info, _ = rb.model_info(strong_report)
    assert info["autoattack_acc"] == f"{100 * robust / row['n']:.2f}"


def test_model_info_of_the_adaptive_smoothing_card(tmp_path, threads):
    out = tmp_path / "bench"
    bench(AS_CARD, n=20, out=out, batch_size=20, use_cache=False, **STRONG)
    info, where = rb.model_info(out)
    assert info["architecture"] == "convnet + convnet + mixing network" and info["eps"] == "0.1"
    assert where == {"dataset": "fashion-mnist", "threat_model": "Linf"}
    assert float(info["external"]) <= float(info["autoattack_acc"]) <= float(info["clean_acc"])
    path = rb.write_model_info(out, tmp_path / "model_info")
    assert path == tmp_path / "model_info" / "fashion-mnist" / "Linf" / f"{AS_CARD}.json"
    assert json.loads(path.read_text()) == info


def test_model_info_refusals(strong_report, digits_card, tmp_path, threads):
    weak = tmp_path / "weak"
    bench(digits_card, n=10, out=weak, attack="apgd", attack_options={"n_iter": 3}, baseline=None, curve=None,
          plots=False, progress=False, use_cache=False)
    with pytest.raises(InputError, match="`mixzoo bench CARD --attack adaptive-strong`") as err:
        rb.model_info(weak)
    assert "\n" not in str(err.value)
    for count_kept in (True, False):  # a report of an older mixzoo: the count alone, or not even that
        old = json.loads((strong_report / "report.json").read_text())
        for m in old["models"]:
            for c in m["components"]:
                c.pop("own_outcomes", None)
                if not count_kept:
                    c.pop("own_broken", None)
        (tmp_path / "old").mkdir(exist_ok=True)
        (tmp_path / "old" / "report.json").write_text(json.dumps(old))
        with pytest.raises(InputError, match="records only the breaks new to it .* --no-cache"):
            rb.model_info(tmp_path / "old")
    with pytest.raises(InputError, match="cannot be set"):
        rb.model_info(strong_report, fields={"clean_acc": "99"})
    with pytest.raises(InputError, match="no report.json"):
        rb.model_info(tmp_path)


def test_cli_report_robustbench(strong_report, tmp_path):
    runner = CliRunner()
    res = runner.invoke(app, ["report", str(strong_report), "--format", "robustbench", "-s", "venue=ICML 2024", "-s",
                              "additional_data=true", "--out", str(tmp_path), "--file-name", "Me2024Mixed"])
    assert res.exit_code == 0, res.output
    info = json.loads(res.stdout)
    assert info["venue"] == "ICML 2024" and info["additional_data"] is True
    assert json.loads((tmp_path / "digits" / "Linf" / "Me2024Mixed.json").read_text()) == info
    res = runner.invoke(app, ["report", str(strong_report), "--format", "csv"])
    assert res.exit_code == 2 and "robustbench" in res.stderr


# ------------------------------------------------------------------------------------------ hostile report files
def _card_row(report: dict) -> dict:
    return next(m for m in report["models"] if m.get("card") and m.get("kind") not in ("abc", "rbc"))


def test_own_breaks_edited_inside_their_bounds_are_refused_not_exported(strong_report, tmp_path):
    """The autoattack-standard component's own_broken set to another count its row allows (at least its new
    breaks, at most the row's): autoattack_acc would change, so the export refuses in one line naming the row,
    the component and both values."""
    data = json.loads((strong_report / "report.json").read_text())
    row = _card_row(data)
    comp = next(c for c in row["components"] if c["name"] == rb.STANDARD_COMPONENT)
    derived = row["clean_outcomes"].count("1") - comp["own_outcomes"].count("1")
    other = comp["newly_broken"] if comp["newly_broken"] != derived else derived + 1
    assert other <= row["clean_outcomes"].count("1") - row["robust_outcomes"].count("1")  # inside the bounds
    folder = _edited(strong_report, tmp_path, lambda d: next(
        c for c in _card_row(d)["components"] if c["name"] == rb.STANDARD_COMPONENT).update(own_broken=other))
    res = CliRunner().invoke(app, ["report", str(folder), "--format", "robustbench", "--out", str(tmp_path / "mi")])
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and res.stdout == "", res.output
    assert all(s in lines[0] for s in (f"row {row['name']!r}", f"component {rb.STANDARD_COMPONENT!r}",
                                       f"own_broken is {other}", f"give {derived}")), lines[0]


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


def _edited(strong_report: Path, tmp_path: Path, edit) -> Path:
    data = json.loads((strong_report / "report.json").read_text())
    edit(data)
    folder = tmp_path / "edited"
    folder.mkdir()
    text = json.dumps(data) if not isinstance(data.get("deep"), int) else json.dumps(data)[:-1] + ', "deep": ' + (
        "[" * data["deep"] + "]" * data["deep"]) + "}"
    (folder / "report.json").write_text(text)
    return folder


HAND_EDITS = {
    "clean_accuracy -3": lambda d: _card_row(d).update(clean_accuracy=-3),
    "robust 1.5": lambda d: _card_row(d).update(robust_accuracy=1.5),
    "n 'ten'": lambda d: _card_row(d).update(n="ten"),
    "clean_accuracy null": lambda d: _card_row(d).update(clean_accuracy=None),
    "eps 'big'": lambda d: d["settings"].update(eps="big"),
    "n 0": lambda d: _card_row(d).update(n=0),
    "a missing name": lambda d: _card_row(d).pop("name"),
    "components 'x'": lambda d: _card_row(d).update(components="x"),
    "n beyond 64 bits": lambda d: _card_row(d).update(n=10 ** 30),
    "own_broken -5": lambda d: [c.update(own_broken=-5) for c in _card_row(d)["components"]],
    "norm '.'": lambda d: d["settings"].update(norm="."),
    "nested 10,000 levels": lambda d: d.update(deep=10_000),
    "card a string": lambda d: _card_row(d).update(card="x"),
}


@pytest.mark.parametrize("edit", sorted(HAND_EDITS))
def test_report_robustbench_refuses_a_hand_edited_report_in_one_line(strong_report, tmp_path, edit):
    folder = _edited(strong_report, tmp_path, HAND_EDITS[edit])
    out = tmp_path / "model_info"
    res = CliRunner().invoke(app, ["report", str(folder), "--format", "robustbench", "--out", str(out)])
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (edit, res.output,
                                                                                       repr(res.exception))
    assert str(folder / "report.json") in lines[0] or edit == "card a string", lines[0]
    assert not out.exists() and res.stdout == ""


def _forge_dataset_name(data: dict, name: str) -> None:
    """The data set's name edited where the report states it and in its run record, the digest recomputed (a
    forger who knows the format; the name alone would disagree with the record)."""
    from mixzoo.core.record import sha256_of

    data["dataset"]["name"] = data["record"]["dataset"] = name
    data["record"]["digest"] = sha256_of({k: v for k, v in data["record"].items() if k != "digest"})


@pytest.mark.parametrize("name", ["../../X", "/ABS/X", "..", "a/../../b", "digits"])
def test_report_out_keeps_every_file_under_out(strong_report, tmp_path, name):
    name = name.replace("/ABS", str(tmp_path / "abs"))
    folder = _edited(strong_report, tmp_path, lambda d: _forge_dataset_name(d, name))
    out = tmp_path / "deep" / "down" / "model_info"
    res = CliRunner().invoke(app, ["report", str(folder), "--format", "robustbench", "--out", str(out)])
    if res.exit_code == 2:  # a name with nothing usable in it
        assert name == ".." and not out.exists()
        return
    assert res.exit_code == 0, res.output
    written = [p for p in tmp_path.rglob("*.json") if p.parent != folder]
    assert len(written) == 1 and out in written[0].parents, written


def test_report_never_replaces_an_unrelated_file(strong_report, tmp_path):
    """An absolute data set name and a card file named like a project's package.json, as a hostile report.json has
    them: an unrelated file in the way is refused, and nothing is written outside --out."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "package.json").write_text('{"name": "mine"}\n')

    def edit(d):
        d["dataset"]["name"] = str(project)
        d["settings"]["norm"] = "."
        _card_row(d)["card_path"] = "package.toml"

    folder = _edited(strong_report, tmp_path, edit)
    res = CliRunner().invoke(app, ["report", str(folder), "--format", "robustbench", "--out", str(tmp_path / "mi")])
    assert res.exit_code == 2 and (project / "package.json").read_text() == '{"name": "mine"}\n'
    out = tmp_path / "mi2"
    target = out / "digits" / "Linf" / "card.json"
    target.parent.mkdir(parents=True)
    target.write_text('{"name": "mine"}\n')  # an unrelated JSON file where model_info would go
    res = CliRunner().invoke(app, ["report", str(strong_report), "--format", "robustbench", "--out", str(out)])
    assert res.exit_code == 2 and "is not a RobustBench model_info file" in res.stderr
    assert target.read_text() == '{"name": "mine"}\n' and res.stdout == ""
    target.unlink()
    os.mkfifo(target)
    res = CliRunner().invoke(app, ["report", str(strong_report), "--format", "robustbench", "--out", str(out)])
    assert res.exit_code == 2 and "FIFO" in res.stderr


def test_report_out_follows_no_symbolic_link_below_out(strong_report, tmp_path):
    """``--out mi`` where ``mi/digits`` (or ``mi/digits/Linf``) is a link elsewhere: refused, nothing written there."""
    elsewhere = tmp_path / "elsewhere"
    for link in ("digits", "digits/Linf"):
        out = tmp_path / f"mi-{link.count('/')}"
        (out / link).parent.mkdir(parents=True, exist_ok=True)
        (elsewhere / link).mkdir(parents=True, exist_ok=True)
        (out / link).symlink_to(elsewhere / link)
        res = CliRunner().invoke(app, ["report", str(strong_report), "--format", "robustbench", "--out", str(out)])
        errors = [line for line in res.stderr.splitlines() if not line.startswith("warning: ") and line.strip()]
        assert res.exit_code == 2 and len(errors) == 1 and "is a symbolic link" in errors[0], res.output
        assert not list(elsewhere.rglob("*.json"))


# ----------------------------------------------------------------------------------------------- hub ids, files
@pytest.mark.parametrize("repo", ["../..", "a/..", "..--../x", "a--b/c", "-a/b", "a/b.git", "org/" + "x" * 97])
def test_push_refuses_repo_ids_the_hub_rejects_and_writes_nothing(digits_card, tmp_path, monkeypatch, repo):
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["push", str(digits_card), "--repo", repo, "--dry-run"])
    assert res.exit_code == 2 and len(res.stderr.strip().splitlines()) == 1, res.output
    assert list(tmp_path.iterdir()) == []  # no hub/..--.. folder


def test_a_hub_card_naming_weights_out_of_its_snapshot_is_the_cards_fault(hf_cache, tmp_path, threads, cache_dir):
    from mixzoo.core.plugins import runtime_failures

    folder = share_push.hub_folder(AS_CARD, REPO, tmp_path / "hub").path
    card = folder / "card.toml"
    card.write_text(card.read_text().replace('"card.mixing-network.safetensors" =',
                                             '"../../card.mixing-network.safetensors" =', 1))
    hub_from_folder(hf_cache, folder)
    before = runtime_failures()
    with pytest.raises(InputError, match="weights") as err:
        mixzoo.load_mixed(f"hf-hub:{REPO}")
    assert "report it" not in str(err.value) and "\n" not in str(err.value) and "card.toml" in str(err.value)
    assert runtime_failures() == before


def test_report_fields_are_checked_by_their_specs(strong_report):
    """``--set`` fields are OptionSpecs: a flag reads true/false, a bad one is one line naming it, a text field keeps
    a number as written."""
    fields = rb.model_info(strong_report, fields={"unreliable": "true", "venue": "2024"})[0]
    assert fields["unreliable"] is True and fields["venue"] == "2024"
    with pytest.raises(InputError, match=r"^option additional_data \(--set additional_data\) of model_info must be"
                                         " true or false, got 'maybe'"):
        rb.model_info(strong_report, fields={"additional_data": "maybe"})
    res = CliRunner().invoke(app, ["report", str(strong_report), "--format", "robustbench", "-s", "venue=2024",
                                   "-s", "name=1.50"])
    assert res.exit_code == 0, res.output
    info = json.loads(res.stdout)
    assert info["venue"] == "2024" and info["name"] == "1.50"


# ------------------------------------------------------------------------------ figures derived from the outcomes
def _duplicated_robust_figure(text: str, row: dict) -> str:
    """The card row's ``robust_accuracy`` written twice, the second 0.9 (JSON would keep the last)."""
    key = f'"robust_outcomes": "{row["robust_outcomes"]}"'
    assert text.count(key) >= 1
    return text.replace(key, f'"robust_accuracy": 0.9, {key}', 1)


@pytest.mark.parametrize("how", ["key twice", "figure edited"])
def test_report_and_push_refuse_a_robust_figure_the_outcomes_do_not_give(strong_report, digits_card, tmp_path,
                                                                         how):
    """report --format robustbench and push --dry-run --report: exit 2 in one line naming the file, not 90.00."""
    data = json.loads((strong_report / "report.json").read_text())
    row = _card_row(data)
    folder = tmp_path / "edited"
    folder.mkdir()
    if how == "key twice":
        text = _duplicated_robust_figure(json.dumps(data), row)
    else:
        row["robust_accuracy"] = row["clean_accuracy"]
        assert row["robust_outcomes"].count("1") != round(row["clean_accuracy"] * row["n"])
        text = json.dumps(data)
    (folder / "report.json").write_text(text)
    runner = CliRunner()
    for args in (["report", str(folder), "--format", "robustbench", "--out", str(tmp_path / "mi")],
                 ["push", str(digits_card), "--repo", REPO, "--dry-run", "--out", str(tmp_path / "hub"), "--report",
                  str(folder)]):
        res = runner.invoke(app, args)
        lines = [line for line in res.stderr.splitlines() if line.strip()]
        assert res.exit_code == 2 and len(lines) == 1, (args[0], res.output)
        assert str(folder / "report.json") in lines[0], lines[0]
        assert ("appears twice" if how == "key twice" else "robust_outcomes give") in lines[0], lines[0]
    assert not (tmp_path / "mi").exists() and not (tmp_path / "hub").exists()


def test_pushed_figures_and_intervals_are_counted_from_the_outcomes(strong_report, digits_card):
    from mixzoo.evaluation.stats import wilson_interval

    data = json.loads((strong_report / "report.json").read_text())
    figures = share_push.bench_figures(data, MixCard.load(digits_card))
    for shown in figures["rows"]:
        m = next(m for m in data["models"] if m["name"] == shown["name"])
        n, robust = len(m["robust_outcomes"]), m["robust_outcomes"].count("1")
        assert shown["robust_accuracy"] == robust / n
        assert shown["robust_ci"] == list(wilson_interval(robust, n))
