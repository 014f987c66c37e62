"""Does mixzoo's evaluation break everything standard AutoAttack breaks, example by example?

    .venv/bin/python benchmarks/autoattack_parity.py \
        --card benchmarks/results/cards/fmnist_mixednuts_population_ln.toml --n 200
    .venv/bin/python benchmarks/autoattack_parity.py --pair digits-std,digits-pgd --n 300     # a digits card first
    .venv/bin/python benchmarks/autoattack_parity.py --card benchmarks/results/cards/fmnist_mixednuts.toml --n 1000 \
        --chunk-dir parity_chunks/     # resumable: each finished chunk of --batch-size images is kept
    # one process per core: add --chunks 0,1 to one and --chunks 2,3 to the other; a last run writes the report

Runs, on the card's MixedNUTS classifier (``mixzoo.load_mixed``, exact gradients) and the first ``n`` evaluation
images at the card's eps:

* the installed ``pyautoattack`` as an outside user runs it: ``AutoAttack(model, version="standard", seed=SEED)``,
  ``run_standard_evaluation(x, y, batch_size=BATCH)`` on all n images at once;
* each mixzoo evaluation of ``--attack`` (default ``adaptive`` and ``adaptive-strong``) as ``mixzoo bench`` runs it:
  chunks of ``--batch-size`` images with every random draw per example index (bench-6; ``--batch-seeds``: chunk
  ``i`` attacked with seed ``SEED + i``, as before).

Lists the examples each side breaks that the other does not, per-component counts and wall times of both sides
and their ratio, and the machine. Writes ``--out``.md / .json (default ``benchmarks/autoattack_parity``).
With n at most the batch size ``adaptive-strong``'s ``autoattack-standard`` component is that very pyautoattack run
(same batch, same seed), so it contains every pyautoattack break by construction; for larger n pyautoattack's
random components draw for other batches, and so do mixzoo's per-example draws always: parity of APGD / Square
breaks is then statistical (FAB-T, which draws nothing, is matched example by example by ``fab-t-exact``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
import warnings
from pathlib import Path

import torch


def _broken(clean: torch.Tensor, robust: torch.Tensor) -> set[int]:
    return set(torch.nonzero(clean & ~robust).squeeze(1).tolist())


def run_pyautoattack(model, x, y, eps, norm, seed, batch_size) -> dict:
    from mixzoo.core.compat import import_autoattack

    aa = import_autoattack()
    model.gradient = "exact"
    attack = aa.AutoAttack(model, norm=norm, eps=eps, seed=seed, version="standard", device=x.device)
    records: list[str] = []

    class Grab(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    handler = Grab(level=logging.DEBUG)
    attack.logger.addHandler(handler)
    old_level = attack.logger.level
    attack.logger.setLevel(logging.DEBUG)
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            adv, _ = attack.run_standard_evaluation(x.clone(), y.clone(), batch_size=batch_size)
    finally:
        attack.logger.removeHandler(handler)
        attack.logger.setLevel(old_level)
    seconds = time.perf_counter() - t0
    with torch.no_grad():
        clean = model(x).argmax(1) == y
        robust = (model(adv).argmax(1) == y) & clean
    return {"seconds": seconds, "clean": clean.cpu(), "robust": robust.cpu(),
            "log": [r for r in records if "robust accuracy" in r]}


def run_mixzoo(model, x, y, eps, norm, seed, batch_size, attack_name, per_example: bool = True,
               first_index: int = 0, options: dict | None = None, index: torch.Tensor | None = None) -> dict:
    """mixzoo's evaluation ``attack_name`` (with attack ``options``) as ``mixzoo bench`` runs it: chunks of
    ``batch_size`` images, every random draw per example index (``index``: each image's own, default
    ``first_index``, ``first_index + 1``, ...)."""
    from mixzoo.core.plugins import lookup

    cls = lookup("attack", attack_name)
    options = dict(options or {})
    precision = str(options.pop("precision", "float32"))  # a run setting (RunSettings.precision), not an option
    options.setdefault("batch_size", batch_size)  # the attack's own batches as large as pyautoattack's
    cls.check_options(options)  # a bad option fails before anything is attacked
    clean, robust, comps, seconds = [], [], {}, 0.0
    for chunk, start in enumerate(range(0, len(y), batch_size)):
        stop = min(len(y), start + batch_size)
        ids = index[start:stop] if index is not None else torch.arange(first_index + start, first_index + stop)
        extra = {"index": ids} if per_example else {}
        res = cls(eps=eps, norm=norm, seed=seed if per_example else seed + chunk, **options).run(
            model, x[start:stop], y[start:stop], progress=False, precision=precision, **extra)
        clean.append(res.clean_correct.bool())
        robust.append(res.robust_correct.bool())
        seconds += res.seconds
        for c in res.components:
            prev = comps.setdefault(c.name, {"newly_broken": 0, "seconds": 0.0})
            prev["newly_broken"] += int(c.newly_broken)
            prev["seconds"] += c.seconds
            for key in ("found_bf16", "confirmed_float32", "rerun_float32"):  # bf16 runs: breaks found / confirmed
                if getattr(c, key, None) is not None:
                    prev[key] = prev.get(key, 0) + int(getattr(c, key))
    return {"seconds": seconds, "clean": torch.cat(clean), "robust": torch.cat(robust), "components": comps}


def _plain(res: dict) -> dict:
    return {k: v.tolist() if isinstance(v, torch.Tensor) else v for k, v in res.items()}


def _chunk_numbers(text: str) -> list[int]:
    try:
        numbers = [int(c) for c in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give chunk numbers like 0,1") from None
    if any(n < 0 for n in numbers):
        raise argparse.ArgumentTypeError(f"{text!r}: chunk numbers start at 0")
    return numbers


def _save(path: Path, part: dict) -> None:
    """Written whole, then renamed: a kill never leaves half a chunk."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(part))
    tmp.replace(path)


def _key(name: str) -> str:
    """A chunk file's name for mixzoo's evaluation ``name``: with the attack's code version when it has one, so
    outcomes of older code stay in the file, under their own key, and are not taken for the current code's."""
    from mixzoo.core.plugins import lookup

    version = getattr(lookup("attack", name), "code_version", None)
    return f"{name}@{version}" if version else name


def run_chunks(model, x, y, eps, norm, args) -> tuple[dict, dict[str, dict]] | None:
    """Both sides on chunks of ``--batch-size`` images; each finished side of a chunk is saved under ``--chunk-dir``
    and skipped by a re-run, which also adds to a kept chunk any evaluation of ``--attack`` it lacks. Returns the
    merged pyautoattack result and mixzoo's per attack, or None while a chunk left to another process (``--chunks``)
    is not finished."""
    chunk_dir = Path(args.chunk_dir)
    chunk_dir.mkdir(parents=True, exist_ok=True)
    names = args.attack.split(",")
    chunks, missing = [], []
    mine = set(args.chunks) if args.chunks else None
    for number, start in enumerate(range(0, len(y), args.batch_size)):
        stop = min(len(y), start + args.batch_size)
        path = chunk_dir / f"chunk_{start:06d}_{stop:06d}.json"
        part = json.loads(path.read_text()) if path.exists() else None
        if mine is not None and number not in mine:
            if part is None or any(_key(name) not in part["mixzoo"] for name in names):
                missing.append(number)
            else:
                chunks.append(part)
            continue
        if part is None:
            aa = run_pyautoattack(model, x[start:stop], y[start:stop], eps, norm, args.seed, args.batch_size)
            part = {"pyautoattack": _plain(aa), "mixzoo": {}}
            _save(path, part)
            print(json.dumps({"chunk": [start, stop], "pyautoattack_s": round(aa["seconds"], 1)}), flush=True)
        for name in names:
            # a chunk kept by an earlier run with other --attack names gets only the evaluations it lacks
            if _key(name) not in part["mixzoo"]:
                mz = run_mixzoo(model, x[start:stop], y[start:stop], eps, norm, args.seed, args.batch_size, name,
                                not args.batch_seeds, first_index=start)
                part["mixzoo"][_key(name)] = _plain(mz)
                _save(path, part)
                print(json.dumps({"chunk": [start, stop], _key(name) + "_s": round(mz["seconds"], 1)}), flush=True)
        chunks.append(part)

    def merge(parts: list[dict]) -> dict:
        out = {"seconds": sum(p["seconds"] for p in parts),
               "clean": torch.tensor([v for p in parts for v in p["clean"]]),
               "robust": torch.tensor([v for p in parts for v in p["robust"]]),
               "log": [line for p in parts for line in p.get("log", [])], "components": {}}
        for p in parts:
            for k, v in p.get("components", {}).items():
                c = out["components"].setdefault(k, {"newly_broken": 0, "seconds": 0.0})
                c["newly_broken"] += v["newly_broken"]
                c["seconds"] += v["seconds"]
        return out

    if missing:
        return None
    return merge([c["pyautoattack"] for c in chunks]), {n: merge([c["mixzoo"][_key(n)] for c in chunks]) for n in names}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--card", help="a mix card (TOML/JSON)")
    src.add_argument("--pair", help="ABC,RBC names: calibrate a card with `mixzoo mix` defaults first")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--attack", default="adaptive,adaptive-strong", help="comma-separated mixzoo evaluations")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=250, help="mixzoo bench's and pyautoattack's default")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: leave torch's default)")
    ap.add_argument("--out", default="benchmarks/autoattack_parity")
    ap.add_argument("--batch-seeds", action="store_true", help="mixzoo side: seed + i for chunk i (before bench-6)")
    ap.add_argument("--chunk-dir", default=None,
                    help="resumable: run both sides chunk by chunk (--batch-size images each, pyautoattack as a user"
                         " running each chunk on its own) and keep each finished chunk here; a re-run skips them")
    ap.add_argument("--chunks", default=None, type=_chunk_numbers,
                    help="comma-separated chunk numbers (0-based) this process computes, e.g. one process per core"
                         " with disjoint sets on one --chunk-dir; the report is written by the run that finds every"
                         " chunk done")
    args = ap.parse_args()
    if args.chunks and not args.chunk_dir:
        ap.error("--chunks needs --chunk-dir (the folder the processes share)")

    import mixzoo
    from mixzoo.core.card import MixCard
    from mixzoo.methods.mixednuts.fitting import mix
    from mixzoo.zoo.data import load_dataset
    from mixzoo.zoo.pairs import card_dataset

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.pair:
        abc, rbc = args.pair.split(",")
        card_path = Path(args.out + "_card.toml")
        mix(abc, rbc, out=card_path, device=args.device, progress=False)
    else:
        card_path = Path(args.card)
    card = MixCard.load(card_path)
    model = mixzoo.load_mixed(card, device=args.device)
    eps, norm = float(card.attack["eps"]), str(card.attack.get("norm", "Linf"))
    data = load_dataset(card_dataset(card, model.rbc), "evaluation", n=args.n)
    x, y = data.images.to(args.device), data.labels.to(args.device)

    if args.chunk_dir:
        merged = run_chunks(model, x, y, eps, norm, args)
        if merged is None:
            waiting = {"done": sorted(set(args.chunks)), "report": "when every chunk is in " + args.chunk_dir}
            print(json.dumps(waiting), flush=True)
            return
        aa, by_attack = merged
    else:
        aa, by_attack = run_pyautoattack(model, x, y, eps, norm, args.seed, args.batch_size), None
    aa_broken = _broken(aa["clean"], aa["robust"])
    print(json.dumps({"pyautoattack": {"seconds": round(aa["seconds"], 1), "robust": int(aa["robust"].sum()),
                                       "broken": sorted(aa_broken), "log": aa["log"]}}), flush=True)
    rows = []
    for name in args.attack.split(","):
        mz = by_attack[name] if by_attack is not None else run_mixzoo(model, x, y, eps, norm, args.seed,
                                                                      args.batch_size, name, not args.batch_seeds)
        mz_broken = _broken(mz["clean"], mz["robust"])
        rows.append({
            "attack": _key(name), "seconds": round(mz["seconds"], 1),
            "robust": int(mz["robust"].sum()), "clean": int(mz["clean"].sum()),
            "only_pyautoattack": sorted(aa_broken - mz_broken), "only_mixzoo": sorted(mz_broken - aa_broken),
            "ratio_to_pyautoattack": round(mz["seconds"] / aa["seconds"], 2),
            "components": {k: {"newly_broken": v["newly_broken"], "seconds": round(v["seconds"], 1)}
                           for k, v in mz["components"].items()},
        })
        print(json.dumps(rows[-1]), flush=True)
        write(args, card_path, eps, norm, aa, rows)


def write(args, card_path, eps, norm, aa, rows) -> None:
    """The .json and .section.md outputs for the rows so far (rewritten after each evaluation)."""
    from mixzoo.core.machine import describe_machine, machine_summary

    result = {
        "card": str(card_path), "n": args.n, "eps": eps, "norm": norm, "seed": args.seed,
        "batch_size": args.batch_size, "mixzoo_randomness": "batch" if args.batch_seeds else "per-example",
        "torch_threads": torch.get_num_threads(),
        "machine": machine_summary(args.device), "machine_detail": describe_machine(args.device),
        "load_average_1_5_15_min": [round(v, 1) for v in os.getloadavg()],
        "pyautoattack": {"seconds": round(aa["seconds"], 1), "robust": int(aa["robust"].sum()),
                         "clean": int(aa["clean"].sum()), "log": aa["log"]},
        "mixzoo": rows,
    }
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    lines = [f"## {card_path.name}, first {args.n} evaluation images, {norm} eps {eps:g}, seed {args.seed}",
             "", f"Machine: {result['machine']}; torch threads {result['torch_threads']}; load average at the end"
             f" {result['load_average_1_5_15_min']} (shared machine: wall times are only comparable within a run).", "",
             f"pyautoattack standard (exact gradients): robust {result['pyautoattack']['robust']} / {args.n}"
             f" (clean {result['pyautoattack']['clean']}), {result['pyautoattack']['seconds']} s; "
             + "; ".join(aa["log"]), "",
             "| mixzoo evaluation | robust | only pyautoattack breaks | only mixzoo breaks | seconds | ratio to"
             " pyautoattack | components (newly broken, s) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        comps = ", ".join(f"{k} {v['newly_broken']} ({v['seconds']} s)" for k, v in r["components"].items())
        lines.append(f"| `{r['attack']}` | {r['robust']} | {r['only_pyautoattack'] or 'none'} |"
                     f" {r['only_mixzoo'] or 'none'} | {r['seconds']} | {r['ratio_to_pyautoattack']} | {comps} |")
    out.with_suffix(".section.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    from mixzoo.core.errors import run_script

    run_script(main)
