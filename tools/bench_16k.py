"""A 16,384-GPU Llama-3-70B step (TP8 PP8 DP256, two device groups: DP replicas 0-127 on 8,192
H100-SXM, 128-255 on 8,192 H200-SXM), replayed folded, with the exactness of the fold checked on a
smaller set of the same shape.

    python tools/bench_16k.py                 # check at DP4 (256 ranks), then the DP256 target
    python tools/bench_16k.py --check-dp 8    # check at DP8 (512 ranks)
    python tools/bench_16k.py --no-check

The workload comes from xsim's template generator (``xsim generate``'s, streaming rank files), with
each rank timed on its group's device (the generator times one device; here a Timer picks the
device by the rank's DP index; rank metadata still names H100).  The cluster is the one
``xsim generate --plan`` builds for two such device groups (NVSwitch nodes of 8, 400 Gb/s NICs per
GPU, one fabric, a link between the groups), each rank on a device of its group.

What is measured, honestly:

- **check** (``--check-dp``, default 4): the complete set is written (every rank file), replayed
  unfolded (every rank simulated) and folded by detection (``xsim_trace.replay.fold``), and the
  declared fold below; every node of every rank must get the same times all three ways.
- **target**: only the 16 distinct ranks (one per pipeline stage per device group: TP peers and DP
  replicas of a group are identical up to their comm-group ids) are generated, with the complete
  comm groups of all 16,384 ranks (``write_workload(ranks=...)`` as ``xsim generate --ranks``);
  the replay (:mod:`xsim_trace.replay.fold_declared`) decodes those 16 files, prices every
  collective for its full group (up to 256 members, on the NCCL model over the two-group cluster)
  and simulates the 16 ranks; the other 16,368 ranks take their representative's times (never
  read, never simulated).  The classes are declared by the benchmark (as the check confirms at
  small DP) and spot-checked (``--spot``, after the replay: that many random absent ranks are
  generated and compared with their representative up to comm-group ids and peers), not found:
  finding them needs all 16,384 rank files decoded (about 40 M nodes, 9 GB of
  files, ~11 min to generate on this machine), which this benchmark does not do.

Prints wall and CPU seconds, peak RSS (of the whole process, generation included), nodes/s (of the
nodes simulated, and of the 16,384 ranks' nodes they stand for), and the ranks folded.  Not a test:
the numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

TP, PP = 8, 8
MODEL = "llama3-70b"
SEQ_LEN = 4096
GROUPS = (("h100", "H100-SXM5-80GB"), ("h200", "H200-SXM-141GB"))


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def setup_for(dp: int):
    """(program, a Timer that times each rank on its group's device, layout)."""
    from xsim_trace.workload.framework import Framework
    from xsim_trace.workload.model import get_model
    from xsim_trace.workload.spec_file import make_setup
    from xsim_trace.workload.timing import Timer

    model = get_model(MODEL).with_(seq_len=SEQ_LEN)
    fw = Framework(tp=TP, pp=PP, dp=dp, micro_batch=1, global_batch=dp * PP)
    first = make_setup(model, fw, GROUPS[0][1])
    second = make_setup(model, fw, GROUPS[1][1]).timer
    program = first.program
    layout = program.layout if hasattr(program, "layout") else None

    @dataclass(frozen=True)
    class TwoGroupTimer(Timer):
        """Ranks of DP index >= dp/2 run on the second group's device."""

        other: Timer | None = None

        def device_ns(self, op, rank: int) -> int:
            if group_of_rank(rank, dp) == 1:
                return self.other.device_ns(op, rank)
            return super().device_ns(op, rank)

    t = first.timer
    timer = TwoGroupTimer(t.device, t.links, t.fw, host=t.host, family=t.family, other=second)
    return program, timer, layout


def dp_index(rank: int, dp: int) -> int:
    return (rank // TP) % dp  # Megatron order tp-cp-dp-pp, tp fastest (cp = 1)


def group_of_rank(rank: int, dp: int) -> int:
    return 0 if dp_index(rank, dp) < dp // 2 else 1


def representatives(dp: int) -> np.ndarray:
    """rep_of per rank: the rank with TP index 0 and the first DP index of its group, same stage."""
    r = np.arange(TP * PP * dp)
    stage = r // (TP * dp)
    first_dp = np.where((r // TP) % dp < dp // 2, 0, dp // 2)
    return stage * TP * dp + first_dp * TP


def cluster_for(dp: int):
    """The two-group cluster ``xsim generate --plan`` builds, each rank on a device of its group."""
    from xsim_trace.cluster.load import cluster_from_dict, cluster_to_dict
    from xsim_trace.evaluate.engine_times import plan_cluster
    from xsim_trace.plan.parse import plan_from_mapping

    half = dp // 2
    stages = [{"group": g, "tp": TP, "layers": [10 * i, 10 * i + 10]} for i in range(PP) for g in ("@",)]
    doc = {
        "name": f"{MODEL}-h100-h200-dp{dp}", "model": {"preset": MODEL, "seq_len": SEQ_LEN},
        "device_groups": [{"name": n, "device": d, "count": half * TP * PP, "devices_per_node": 8, "nic_gbps": 400}
                          for n, d in GROUPS],
        "pipelines": [{"name": n, "replicas": half, "stages": [dict(s, group=n) for s in stages]} for n, _ in GROUPS],
        "micro_batches": PP, "schedule": "1f1b",
    }
    data = cluster_to_dict(plan_cluster(plan_from_mapping(doc, "bench_16k", memory=False)))
    used = [0, 0]
    rank_map = []
    for r in range(TP * PP * dp):
        g = group_of_rank(r, dp)
        rank_map.append([g, used[g] // 8, used[g] % 8])
        used[g] += 1
    data["rank_map"] = rank_map
    return cluster_from_dict(data)


def generate(prefix: Path, dp: int, ranks=None) -> float:
    from xsim_trace.workload.generator import write_workload

    program, timer, _ = setup_for(dp)
    t0 = time.perf_counter()
    write_workload(prefix, program, timer, None if ranks is None else [int(r) for r in ranks])
    return time.perf_counter() - t0


def backend_for(cluster):
    from xsim_trace.network.registry import make_backend
    from xsim_trace.network.topology import build_topology

    return make_backend("analytical", build_topology(cluster))


def replay_declared_set(prefix: Path, dp: int, cluster):
    """Decode the present rank files, compile, replay folded: (declared set, times, stats, iteration per rank)."""
    from xsim_trace.io.et_columns import read_columns
    from xsim_trace.io.rankset import find_rank_files, read_comm_groups
    from xsim_trace.replay.fold_declared import compile_declared, replay_declared

    _, files = find_rank_files(prefix, partial=True)
    cols = {r: read_columns(files[r]) for r in sorted(files)}
    groups = read_comm_groups(str(prefix) + ".comm_groups.json")
    d = compile_declared(cols, groups, TP * PP * dp)
    times, stats, per_rank = replay_declared(d, representatives(dp), cluster, backend_for(cluster))
    return d, times, stats, per_rank


def check(dp: int, tmp: Path) -> bool:
    """Complete set unfolded vs detected fold vs declared fold, every node."""
    from xsim_trace.replay.api import collective_pricer
    from xsim_trace.replay.columnar import compile_rank_files
    from xsim_trace.replay.engine import Engine
    from xsim_trace.replay.settings import ReplaySettings

    full_prefix, part_prefix = tmp / "full" / "step", tmp / "part" / "step"
    gen_s = generate(full_prefix, dp)
    generate(part_prefix, dp, np.unique(representatives(dp)))
    cluster = cluster_for(dp)
    w, _ = compile_rank_files(full_prefix, columnar=True)
    node_of = [cluster.node_of(r) for r in range(w.num_ranks)]
    rank_class = [group_of_rank(r, dp) for r in range(w.num_ranks)]

    def run(fold: bool):
        backend = backend_for(cluster)
        pricer, settings = collective_pricer(ReplaySettings(), cluster, backend)
        return Engine(w, backend, settings, node_of=node_of, pricer=pricer, compiled=True, fold=fold,
                      rank_class=rank_class).run()

    full, found = run(False), run(True)
    d, times, stats, per_rank = replay_declared_set(part_prefix, dp, cluster)
    keys = ("ready_ns", "start_ns", "end_ns", "wait_ns")
    same_found = all(np.array_equal(getattr(full, k), getattr(found, k)) for k in keys + ("peer_node",))
    # the declared set's nodes are the representatives' nodes of the complete set
    pos = np.arange(w.num_nodes) - w.rank_ptr[:-1][w.node_rank]
    rep = representatives(dp)[w.node_rank]
    local_rank = np.searchsorted(d.rank_ids, rep)
    twin = d.workload.rank_ptr[:-1][local_rank] + pos
    same_declared = all(np.array_equal(getattr(full, k), times[i][twin]) for i, k in enumerate(keys))
    iters = np.maximum.reduceat(full.end_ns, w.rank_ptr[:-1])
    same_iter = np.array_equal(iters, per_rank)
    print(f"check at DP{dp} ({w.num_ranks:,} ranks, {w.num_nodes:,} nodes; complete set generated in {gen_s:.1f} s):")
    print(f"  detected fold: {found.stats.folded_ranks:,} of {w.num_ranks:,} ranks folded, every node's times "
          f"{'identical' if same_found else 'DIFFERENT'} to the unfolded replay")
    print(f"  declared fold ({len(d.rank_ids)} rank files): every node's times "
          f"{'identical' if same_declared and same_iter else 'DIFFERENT'}; iteration {int(iters.max()):,} ns")
    return same_found and same_declared and same_iter


def spot_check(dp: int, tmp: Path, count: int) -> str:
    """Generate ``count`` random absent ranks (seeded) and compare each with its representative
    up to comm-group ids and peers (:func:`~xsim_trace.replay.fold_declared.differs_from_representative`)."""
    from xsim_trace.io.et_columns import read_columns
    from xsim_trace.io.rankset import find_rank_files, read_comm_groups
    from xsim_trace.replay.fold_declared import differs_from_representative

    rep_of = representatives(dp)
    absent = np.flatnonzero(rep_of != np.arange(len(rep_of)))
    rng = np.random.default_rng(16384)
    sample = np.unique(np.concatenate([rng.choice(absent, size=min(count - 1, len(absent)), replace=False), absent[-1:]]))
    prefix = tmp / "sample" / "step"
    generate(prefix, dp, np.unique(np.concatenate([sample, np.unique(rep_of[sample])])))
    _, files = find_rank_files(prefix, partial=True)
    groups = read_comm_groups(str(prefix) + ".comm_groups.json")
    for r in sample.tolist():
        why = differs_from_representative(read_columns(files[r]), read_columns(files[int(rep_of[r])]), groups, rep_of)
        if why:
            raise SystemExit(f"rank {r} is not like its representative {int(rep_of[r])}: {why}")
    return f"{len(sample)} random folded ranks generated and compared with their representatives: same up to comm-group ids"


def target(dp: int, tmp: Path, spot: int) -> None:
    prefix = tmp / "target" / "step"
    reps = np.unique(representatives(dp))
    c0, w0 = time.process_time(), time.perf_counter()
    gen_s = generate(prefix, dp, reps)
    gen_cpu = time.process_time() - c0
    rss_gen = peak_rss_mb()
    c1, w1 = time.process_time(), time.perf_counter()
    cluster = cluster_for(dp)
    d, times, stats, per_rank = replay_declared_set(prefix, dp, cluster)
    wall, cpu = time.perf_counter() - w1, time.process_time() - c1
    rss_replay = peak_rss_mb()
    spot_line = spot_check(dp, tmp, spot) if spot else "not run"
    n_sim = d.workload.num_nodes
    counts = np.diff(d.workload.rank_ptr)
    n_all = int(counts[np.searchsorted(d.rank_ids, representatives(dp))].sum())
    ranks = TP * PP * dp
    g = np.array([group_of_rank(r, dp) for r in range(ranks)])
    rows = [
        ("workload", f"{MODEL} seq {SEQ_LEN}, TP{TP} PP{PP} DP{dp}: {ranks:,} ranks on {ranks // 2:,} H100 + "
         f"{ranks // 2:,} H200", f"{n_all:,} nodes in all ranks"),
        ("generate the distinct ranks", f"{len(reps)} rank files + comm groups: {gen_s:.1f} s wall, {gen_cpu:.1f} s CPU",
         "(not counted)"),
        ("replay: decode + compile + price + simulate", f"{wall:.2f} s wall, {cpu:.2f} s CPU",
         f"{n_sim:,} nodes simulated ({n_sim / cpu:,.0f}/s); {n_all / cpu:,.0f} nodes/s of the full step"),
        ("ranks folded", f"{stats['folded_ranks']:,} of {ranks:,}", f"{len(d.rank_ids)} simulated"),
        ("peak RSS", f"{rss_replay:,.0f} MB (after generation: {rss_gen:,.0f} MB)", ""),
        ("declared classes, spot check", spot_line, "(after the replay, not counted)"),
        ("iteration", f"{int(per_rank.max()) / 1e6:,.3f} ms",
         f"H100 ranks {int(per_rank[g == 0].max()) / 1e6:,.3f} ms, H200 ranks {int(per_rank[g == 1].max()) / 1e6:,.3f} ms"),
        ("engine", f"{stats['events']:,} events, {stats['collectives']:,} collectives", f"{stats['flows']:,} p2p flows"),
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        print("  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dp", type=int, default=256, help="DP degree of the target (even; default 256: 16,384 ranks)")
    ap.add_argument("--check-dp", type=int, default=4, help="DP degree of the exactness check (even; default 4)")
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--spot", type=int, default=32, help="absent ranks of the target to generate and compare with "
                    "their representative (default 32; 0: none)")
    args = ap.parse_args()
    if args.dp % 2 or args.check_dp % 2:
        raise SystemExit("DP degrees must be even (two device groups of DP/2 replicas)")
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        if not args.no_check:
            ok = check(args.check_dp, Path(tmp))
        target(args.dp, Path(tmp), args.spot)
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
