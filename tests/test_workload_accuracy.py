"""The accuracy tool on the published SC'21 rows (closed-form path; the CI table is in tools/)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REFERENCE = Path(__file__).parents[1].parent / "shared" / "reference"
TOOL = Path(__file__).parents[1] / "tools" / "accuracy_megatron.py"


@pytest.fixture(scope="module")
def tool():
    if not (REFERENCE / "megatron_sc21_a100.csv").is_file():
        pytest.skip(f"reference tables not found at {REFERENCE}")
    spec = importlib.util.spec_from_file_location("accuracy_megatron", TOOL)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_sc21_rows_within_ten_percent(tool):
    rows = tool._sc21_rows(REFERENCE / "megatron_sc21_a100.csv")
    assert len(rows) == 6
    for row in rows:
        sim, path = tool.predict(row, tool.CALIBRATION)
        assert path == "estimate"
        assert abs(sim - row.measured_s) / row.measured_s < 0.10, row.name


def test_ci_rows_parse_and_skip_with_reasons(tool):
    skipped = []
    rows = tool._ci_rows(REFERENCE / "megatron_ci_step_times.csv", skipped)
    assert len(rows) > 200
    assert all(r.fw.world_size == 8 for r in rows)
    assert any("T5" in why for _, why in skipped)
    row = next(r for r in rows if r.name == "gpt/gpt3_mcore_tp4_pp1_resume_torch [dev_dgx_a100]")
    assert (row.fw.tp, row.fw.dp, row.fw.microbatches, row.model.vocab) == (4, 2, 4, 50688)


def test_ci_rows_take_the_transformer_implementation_from_the_test_case(tool):
    rows = {r.name: r for r in tool._ci_rows(REFERENCE / "megatron_ci_step_times.csv", [])}
    # --transformer-impl local (gpt3_mcore_tp*), TE unfused attention (BERT), local spec, TE removed: no flash
    for name in ("gpt/gpt3_mcore_tp4_pp1_resume_torch [dev_dgx_a100]", "bert/bert_mcore_tp2_pp2 [lts_dgx_a100]",
                 "bert/bert_mcore_tp2_pp2_local_spec [dev_dgx_h100]", "gpt/gpt3_mcore_tp2_pp2_uninstall_te [dev_dgx_a100]"):
        assert rows[name].model.flash_attention is False, name
    assert rows["gpt/gpt3_mcore_te_tp1_pp2_resume_torch_dist_rope_embeddings [dev_dgx_a100]"].model.flash_attention is True
    assert {r.golden for r in rows.values()} == {"dev_dgx_a100", "lts_dgx_a100", "dev_dgx_h100"}


def test_ci_rows_take_run_settings_from_the_test_case_config(tool):
    """tools/data/megatron_ci_cases.csv: what each test case's model_config.yaml sets beyond the CSV."""
    cases = tool.load_cases()
    ci_names = {r.name.split(" [")[0] for r in tool._ci_rows(REFERENCE / "megatron_ci_step_times.csv", [])}
    in_scope = {r.name.split(" [")[0] for r in tool._ci_rows(REFERENCE / "megatron_ci_step_times.csv", [])
                if not tool.out_of_scope(r)}
    assert in_scope <= set(cases) <= ci_names  # every in-scope case read, nothing unknown
    rows = {r.name: r for r in tool._ci_rows(REFERENCE / "megatron_ci_step_times.csv", [])}
    # --num-layers-per-virtual-pipeline-stage 1 with 12 layers on pp 4: 3 model chunks per rank
    vp1 = rows["gpt/gpt3_mcore_te_tp1_pp4_vp1_resume_torch_dist [dev_dgx_a100]"]
    assert (vp1.fw.vpp, vp1.fw.schedule.value) == (3, "interleaved")
    assert rows["bert/bert_mcore_tp1_pp4_vp2 [lts_dgx_a100]"].fw.vpp == 3  # 24 layers, pp 4, 2 per chunk
    assert rows["gpt/gpt3_mcore_te_tp1_pp4_vp1_uneven_pipeline [dev_dgx_a100]"].fw.vpp == 1  # no virtual stages
    # --attention-backend unfused on a TE case; deterministic mode off where the config leaves it out
    assert rows["gpt/gpt3_mcore_te_tp1_pp4_vp1 [dev_dgx_a100]"].model.flash_attention is False
    assert rows["gpt/gpt3_mcore_te_tp2_pp2_resume_torch_dist [dev_dgx_a100]"].fw.deterministic is True
    assert rows["gpt/gpt3_mcore_te_tp2_pp2_cross_entropy_loss_fusion [dev_dgx_a100]"].fw.deterministic is False
    # sinkhorn top-1 routing of the 8experts2parallel cases; top-2 where the config says so
    assert rows["moe/gpt3_mcore_te_tp2_pp1_resume_torch_dist_te_8experts2parallel_dist_optimizer [dev_dgx_a100]"].model.moe_top_k == 1
    assert rows["moe/gpt3_mcore_te_tp2_pp1_te_8experts_etp1_ep4 [dev_dgx_a100]"].model.moe_top_k == 2


def test_one_calibration_per_golden_and_out_of_scope_reasons(tool):
    assert set(tool.CALIBRATION) == {"dev_dgx_a100", "lts_dgx_a100", "dev_dgx_h100", "sc21"}
    # per golden: the per-call host cost and the two HostModel factors, nothing else
    assert all(set(c) <= {"host_module_ns", "moe_factor", "attention_core_factor", "deterministic_factor"}
               for c in tool.CALIBRATION.values())
    rows = tool._ci_rows(REFERENCE / "megatron_ci_step_times.csv", [])
    oos = [r for r in rows if tool.out_of_scope(r)]
    assert 0 < len(oos) < len(rows) // 5
    muon = next(r for r in rows if "_muon [" in r.name)
    assert "Muon" in tool.out_of_scope(muon)
    assert tool.out_of_scope(next(r for r in rows if r.name.startswith("gpt/gpt3_mcore_tp1_pp2 ["))) is None


def test_ci_closed_form_accuracy_does_not_regress(tool):
    """Closed form over every CI row under the shipped calibration (figures in docs/workload.md)."""
    import statistics

    rows = tool._ci_rows(REFERENCE / "megatron_ci_step_times.csv", [])
    errs = {r.name: abs(tool.predict(r, tool.CALIBRATION)[0] - r.measured_s) / r.measured_s for r in rows}
    in_scope = [e for r in rows if not tool.out_of_scope(r) for e in [errs[r.name]]]
    assert statistics.median(errs.values()) < 0.12
    assert statistics.median(in_scope) < 0.105


def test_residual_factors_rank_a_planted_cause_first(tool, tmp_path, capsys):
    """tools/residual_factors_megatron.py: errors planted by transformer implementation (+30% on
    every local row, -10% on the others) are fully explained by that factor, ranked first."""
    sys.path.insert(0, str(TOOL.parent))
    spec = importlib.util.spec_from_file_location("residual_factors_megatron", TOOL.parent / "residual_factors_megatron.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rows = [r for r in tool._ci_rows(REFERENCE / "megatron_ci_step_times.csv", []) if r.golden == "dev_dgx_h100"]
    cases = tool.load_cases()
    local = {r.name for r in rows if (c := cases.get(r.name.split(" [")[0])) is not None and c.transformer_impl == "local"}
    assert local and len(local) < len(rows)
    out = tmp_path / "planted.csv"
    out.write_text("source,row,measured_s,simulated_s,error_pct,path,out_of_scope\n" + "".join(
        f"ci,{r.name},1,1,{30.0 if r.name in local else -10.0},estimate,\n" for r in rows))
    assert mod.main([str(out), "--golden", "dev_dgx_h100"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[2].split()[:2] == ["transformer", "impl"]
    assert table[2].split()[-2:] == ["0.0%", str(len(rows))]
