"""``xsim plan search --cluster C --model M --out DIR``: find the best deployment plan for a cluster."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

from xsim_trace.cli.device_file import add_device_file, run_catalog
from xsim_trace.errors import ConfigError
from xsim_trace.io import atomic_write, check_output_folder, output_set


def register(psub: argparse._SubParsersAction) -> None:
    s = psub.add_parser("search", help="search deployment plans for a cluster and model; write the best as a plan file",
                        description="Enumerate pipelines / replicas over the cluster's device groups (group replicas with "
                                    "per-replica batch shares, mixed pipelines in every group order), TP per stage, "
                                    "stage counts, layer split, schedule and reshard strategy; keep memory-feasible "
                                    "plans, prune with the closed form, replay the best few.")
    s.add_argument("--cluster", required=True, metavar="FILE_OR_PRESET")
    s.add_argument("--model", required=True, help="model preset (see `xsim generate --list-models`)")
    s.add_argument("--gbs", type=int, default=64, help="global batch in sequences (default 64)")
    s.add_argument("--mbs", type=int, default=1, help="micro-batch size in sequences (default 1)")
    s.add_argument("--seq-len", type=int, help="sequence length (default: the preset's)")
    s.add_argument("--objective", default="step", help="step (default), cost (device-seconds per step) or tokens_per_s")
    s.add_argument("--budget", type=float, default=600.0, metavar="SECONDS", help="time for the search (default 600)")
    s.add_argument("-j", "--jobs", type=int, default=1, help="replays in parallel processes (default 1)")
    s.add_argument("--ray", metavar="ADDRESS", help="run the replays as Ray tasks on this cluster address ('auto' = local)")
    s.add_argument("--top", type=int, default=5, help="plans in the table (default 5)")
    s.add_argument("--replay", type=int, default=3, help="how many of the best to rewrite and replay (default 3; 0 = none)")
    s.add_argument("--replay-max-ranks", type=int, default=128,
                   help="replay only plans of at most this many ranks (default 128; larger ones keep the closed form)")
    s.add_argument("--backend", default="analytical", help="network backend of the replay (default analytical)")
    s.add_argument("--max-stages", type=int, default=16, help="most pipeline stages (default 16)")
    s.add_argument("--no-mixed", action="store_true", help="only group replicas (no pipeline through several groups)")
    s.add_argument("--hetero-tp", action="store_true",
                   help="also TP groups over two device groups (half the TP ranks on each, paced by the slower)")
    s.add_argument("--placement", choices=("pipeline", "stage"), default="pipeline",  # plan.model.PLACEMENTS (importing it costs the parser ~0.1 s)
                   help="where ranks sit: pipeline after pipeline (default) or stage by stage (a stage's data-parallel "
                        "replicas side by side, as HexiScale / FlashFlex and Megatron's rank order place them)")
    s.add_argument("--every-device", action="store_true", help="only plans that use every device of the cluster")
    s.add_argument("--distributed-optimizer", action="store_true",
                   help="plans shard the optimizer state over their data-parallel replicas (ZeRO-1 / FSDP SHARD_GRAD_OP)")
    s.add_argument("--out", required=True, metavar="DIR", help="writes DIR/best_plan.yaml and DIR/search.json")
    add_device_file(s)
    s.set_defaults(func=cmd_search)


def _space(args: argparse.Namespace, cluster: Any):
    from xsim_trace.plan.document import groups_from_cluster
    from xsim_trace.plan.search import OBJECTIVES
    from xsim_trace.plan.space import Space
    from xsim_trace.plan.model_spec import ModelSpec
    from xsim_trace.workload.model import get_model

    if args.objective not in OBJECTIVES:
        raise ConfigError(f"unknown objective {args.objective!r} (choose {', '.join(OBJECTIVES)})", field="--objective")
    counts = {"--gbs": args.gbs, "--mbs": args.mbs, "--top": args.top, "--jobs": args.jobs, "--max-stages": args.max_stages}
    for flag, value in counts.items():
        if value < 1:
            raise ConfigError(f"expected a positive integer, found {value}", field=flag)
    if args.gbs % args.mbs:
        raise ConfigError(f"global batch {args.gbs} is not a multiple of the micro-batch size {args.mbs}", field="--gbs")
    if args.jobs > 1 and args.ray:
        raise ConfigError("give -j or --ray, not both", field="--ray")
    try:
        wm = get_model(args.model)
    except ConfigError as exc:
        raise ConfigError(exc.message, field="--model") from None
    model = ModelSpec.from_workload(wm, seq_len=args.seq_len, micro_batch_size=args.mbs)
    return Space(groups_from_cluster(cluster), model, args.gbs // args.mbs, max_stages=args.max_stages,
                 mixed=not args.no_mixed, hetero_tp=args.hetero_tp, placement=args.placement,
                 every_device=args.every_device, distributed_optimizer=args.distributed_optimizer)


def _replay_one(job: tuple) -> int | None:
    """Rewrite and replay one plan on the (resolved) cluster (a worker-process entry point)."""
    plan, template, cluster, backend, max_ranks = job
    if sum(st.tp for p in plan.pipelines for st in p.stages) > max_ranks:
        return None
    from xsim_trace.evaluate.compare import evaluate
    from xsim_trace.evaluate.engine_times import engine_times

    return evaluate(plan, template, lambda res: engine_times(res, cluster, backend))[2]


def _replayers(args: argparse.Namespace, template: Any, cluster: Any):
    job = lambda plan: (plan, template, cluster, args.backend, args.replay_max_ranks)  # noqa: E731
    if args.ray:
        try:
            import ray  # noqa: F401
        except ImportError:
            raise ConfigError("--ray needs the ray package (pip install ray)", field="--ray") from None

        def many(plans: Sequence) -> list:
            ray.init(address=args.ray, ignore_reinit_error=True)
            task = ray.remote(_replay_one)
            return ray.get([task.remote(job(p)) for p in plans])
        return None, many
    if args.jobs > 1:
        def many(plans: Sequence) -> list:
            from concurrent.futures import ProcessPoolExecutor

            with ProcessPoolExecutor(max_workers=args.jobs) as pool:
                return list(pool.map(_replay_one, [job(p) for p in plans]))
        return None, many
    return (lambda plan: _replay_one(job(plan))), None


class _Progress:
    """A tqdm bar on a terminal; else a line per tenth of each phase on stderr."""

    def __init__(self, quiet: bool) -> None:
        self.quiet, self.bar, self.phase, self.shown = quiet, None, None, -1

    def __call__(self, phase: str, done: int, total: int) -> None:
        if self.quiet:
            return
        if sys.stderr.isatty():
            from xsim_trace.cli.progress import progress_bar

            if phase != self.phase:
                self.close()
                self.bar = progress_bar(total, f"plan search: {phase}", unit="plan", min_items=1)
                self.phase = phase
            self.bar.n = done
            self.bar.refresh()
            return
        if phase != self.phase:
            self.phase, self.shown = phase, -1
        tenth = done * 10 // max(1, total)
        if tenth != self.shown:
            self.shown = tenth
            print(f"plan search: {phase} {done}/{total}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def format_rows(result) -> str:
    head = ["#", "plan", "micro-batches", "layers/stage", "step ms", "by", "MFU", "bubble", "straggler ms", "headroom",
            "tokens/s"]
    body = []
    for i, s in enumerate(result.top):
        e = s.estimate
        shares = sorted(set(s.shares()))
        body.append([str(i + 1), s.candidate.text(), "/".join(map(str, shares)), e.layers_text(), f"{s.step_ns / 1e6:.2f}",
                     "replay" if s.replay_ns is not None else "closed form", f"{e.mfu * 100:.1f}%",
                     f"{e.bubble * 100:.1f}%", f"{e.straggler_ns / 1e6:.2f}", f"{e.headroom * 100:.0f}%",
                     f"{e.tokens_per_s * e.step_ns / s.step_ns:,.0f}"])
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    line = lambda cells: "  ".join(c.ljust(w) if i in (1, 2, 3, 5) else c.rjust(w)  # noqa: E731
                                   for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([line(head), line(["-" * w for w in widths])] + [line(b) for b in body])


def _row_json(s) -> dict:
    e = s.estimate
    return {"plan": s.candidate.text(), "family": s.candidate.family, "micro_batches": list(s.shares()),
            "layers": e.layers_text(), "closed_form_step_ns": e.step_ns, "replay_step_ns": s.replay_ns,
            "replay_note": s.replay_note, "mfu": e.mfu, "bubble": e.bubble, "straggler_ns": e.straggler_ns,
            "memory_headroom": e.headroom, "tokens_per_s": e.tokens_per_s * e.step_ns / s.step_ns, "devices": e.devices}


#: the files a search writes in --out (together: both or neither)
_SEARCH_FILES = ("best_plan.yaml", "search.json")


def cmd_search(args: argparse.Namespace) -> int:
    import yaml

    from xsim_trace.cluster import load_cluster
    from xsim_trace.plan.document import plan_document
    from xsim_trace.plan.search import resolved, search
    from xsim_trace.layer_templates.template import templates_from_model

    check_output_folder(args.out)  # before the search, not after it
    cluster = load_cluster(args.cluster, catalog=run_catalog(args))  # GPU types resolved once, specs travel down
    space = _space(args, cluster)
    template = templates_from_model(space.model, space.groups[0].device_spec, 1)
    replay, many = _replayers(args, template, cluster)
    prog = _Progress(args.quiet)
    try:
        result = search(space, template, objective=args.objective, top_k=args.top, budget_s=args.budget,
                        replay=replay, replay_many=many, replay_top=args.replay, progress=prog)
    finally:
        prog.close()
    best = resolved(result.best)
    doc = plan_document(best, name=f"search-{args.model}-{cluster.name}")
    header = (f"# xsim plan search --cluster {args.cluster} --model {args.model} --gbs {args.gbs} --mbs {args.mbs}"
              f" --objective {args.objective}\n# best: {result.best.candidate.text()}, "
              f"{result.best.step_ns / 1e6:.2f} ms per step ({'replay' if result.best.replay_ns else 'closed form'})\n")
    st = result.stats
    summary = {"cluster": args.cluster, "model": args.model, "gbs": args.gbs, "mbs": args.mbs,
               "seq_len": space.model.seq_len, "objective": args.objective,
               "structures": st.candidates, "evaluated": st.evaluated, "pruned": st.pruned,
               "infeasible": st.infeasible, "budget_hit": st.budget_hit, "replayed": st.replayed,
               "elapsed_s": round(st.elapsed_s, 3), "top": [_row_json(s) for s in result.top]}
    out = Path(args.out)
    texts = {"best_plan.yaml": header + yaml.safe_dump(doc, sort_keys=False, default_flow_style=None),
             "search.json": json.dumps(summary, indent=1) + "\n"}
    with output_set(out, _SEARCH_FILES.__contains__, label="search") as staged:
        for name, text in texts.items():
            with atomic_write(staged.path(name)) as handle:
                handle.write(text)
    print(format_rows(result))
    print(f"\n{st.candidates} structures, {st.evaluated} costed by the closed form, {st.pruned} pruned by the bound"
          f"{', budget reached' if st.budget_hit else ''}; {st.replayed} replayed ({args.backend}); "
          f"{sum(st.infeasible.values())} infeasible ({', '.join(f'{k} {v}' for k, v in sorted(st.infeasible.items())) or '-'})")
    print(f"best plan: {out / 'best_plan.yaml'}")
    return 0
