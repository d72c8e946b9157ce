"""`gspo-trl plan RECIPE` end to end: every shipped recipe on its `launch:` hardware, broken variants,
and the one-line warning `gspo-trl validate` prints when a recipe's own hardware does not fit."""

from __future__ import annotations

import pytest

from gspo_trl.cli.main import main as gspo_trl_main
from gspo_trl.config.shipped import shipped_recipes
from tests._paths import ROOT

# The 8B recipe's `launch:` hardware trains on one node (the other serves vLLM); at 16 x 8k tokens per
# GPU its activations overflow 80 GB, so it is planned at 8 per GPU with twice the accumulation and
# steps_per_generation: the same 512-completion rollout batch and 4 updates per rollout batch.
EIGHT_B_AT_8_PER_GPU = [
    "--per_device_train_batch_size",
    "8",
    "--gradient_accumulation_steps",
    "2",
    "--steps_per_generation",
    "8",
]
OVERRIDES = {"qwen3-8b/math": EIGHT_B_AT_8_PER_GPU}


def run_plan(capsys, *argv: str) -> tuple[int, str, str]:
    code = gspo_trl_main(["plan", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("name", list(shipped_recipes()))
def test_every_shipped_recipe_fits_its_launch_hardware(capsys, name):
    code, out, err = run_plan(capsys, name, *OVERRIDES.get(name, []))
    print(out)  # the verdict, for -s runs and failure reports
    assert code == 0, err or out
    assert "Verdict: FITS" in out
    assert "batches   generation batch" in out and ": ok" in out
    assert "GSPO needs" not in out


def test_eight_b_serves_vllm_from_its_second_node(capsys):
    code, out, _ = run_plan(capsys, "qwen3-8b/math", *EIGHT_B_AT_8_PER_GPU)
    assert code == 0
    assert "node 2 runs `trl vllm-serve` (tensor parallel 2 x data parallel 4, launch:)" in out
    assert "8 training processes" in out
    assert "strategy  zero3 (launch.accelerate_config configs/zero3.yaml)" in out
    assert "updates   4 optimizer update(s)" in out


def test_a_cpu_server_recipe_is_planned_on_an_assumed_server_node_as_validate_accepts_it(capsys):
    """Nodes unstated (a CPU recipe's launch: gives no hardware): one node assumed for the server
    and one to train; it used to assume 1 and refuse what validate and train accept."""
    vllm = ["--use_vllm", "true", "--vllm_mode", "server"]
    server = [*vllm, "--vllm_server_base_url", "http://127.0.0.1:8000"]
    status, out, err = run_plan(capsys, "tiny/reversal", *server)
    assert status == 0, out + err
    assert "nodes: assumed: the vLLM server's and one that trains" in out and "1 training node(s)" in out, out
    status, out, err = run_plan(capsys, "tiny/reversal", *server, "--nodes", "1")
    assert status == 2 and "no node is left to train" in err, out + err


# (id, argv, exit status, words in stdout, words in stderr)
BROKEN = [
    (
        "8B 16x8k DDP",
        [
            "qwen3-8b/math",
            "--accelerate-config",
            "configs/ddp.yaml",
            "--per_device_train_batch_size",
            "16",
            "--steps_per_generation",
            "4",
            "--gradient_accumulation_steps",
            "1",
        ],
        1,
        ["Verdict: DOES NOT FIT", "dominant term: activations", "first fix to try:", "strategy  ddp"],
        [],
    ),
    ("server on 1 node", ["qwen3-8b/math", "--nodes", "1"], 2, [], ["vllm_mode", "no node is left to train"]),
    (
        "KV cache below one sequence",
        ["qwen3-1.7b/math", "--vllm_gpu_memory_utilization", "0.06"],
        1,
        ["Verdict: DOES NOT FIT", "dominant term: vLLM", "vllm_gpu_memory_utilization >="],
        [],
    ),
    (
        "groups do not divide",
        ["qwen3-0.6b/math", "--per_device_train_batch_size", "6", "--gpus-per-node", "1"],
        2,
        [],
        ["num_generations", "groups of 16"],
    ),
    # refused by validate, so by the plan first, in validate's line (it used to plan it, exit 0)
    ("on-policy", ["qwen3-0.6b/math", "--steps_per_generation", "1"], 2, [], ["every update is on-policy"]),
    ("bad gpu memory", ["qwen3-0.6b/math", "--gpu-memory", "lots"], 2, [], ["--gpu-memory 'lots'"]),
    ("no such config", ["qwen3-0.6b/math", "--accelerate-config", "nowhere.yaml"], 2, [], ["nowhere.yaml"]),
    (
        "both spellings",
        ["qwen3-0.6b/math", "--accelerate-config", "configs/ddp.yaml", "--config", "configs/ddp.yaml"],
        2,
        [],
        ["give --accelerate-config only"],
    ),
    ("not a recipe", ["nowhere/recipe.yaml"], 2, [], ["file not found"]),
    ("no recipe", [], 2, [], ["no recipe given"]),
    ("unknown model", ["qwen3-0.6b/math", "--model.name_or_path", "org/unknown"], 2, [], ["org/unknown"]),
]


@pytest.mark.parametrize(
    ("argv", "code", "out_words", "err_words"), [c[1:] for c in BROKEN], ids=[c[0] for c in BROKEN]
)
def test_broken_variants(capsys, argv, code, out_words, err_words):
    status, out, err = run_plan(capsys, *argv)
    assert status == code, out + err
    for word in out_words:
        assert word in out, out
    for word in err_words:
        assert word in err, err
    if code == 2:
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_flags_win_over_the_launch_section(capsys):
    code, out, _ = run_plan(
        capsys, "qwen3-1.7b/math", "--nodes", "2", "--gpus-per-node", "4", "--gpu-memory", "141GB"
    )
    assert code == 0
    assert (
        "2 node(s) x 4 GPU(s), 141 GB each (nodes: --nodes, GPUs: --gpus-per-node, memory: --gpu-memory)"
        in out
    )
    assert "8 training processes" in out


RECIPE = """\
# Test recipe: a shipped model's shape on a synthetic task, so validate needs no download.
launch: {nodes: 1, gpus_per_node: 8, gpu_memory_gb: 80, accelerate_config: configs/ddp.yaml}
model: {name_or_path: Qwen/Qwen3-8B, dtype: bfloat16}
data: {path: synthetic:reversal, num_rows: 64, solution_column: solution}
rewards: [gspo_trl.data.synthetic:digit_reversal_reward]
num_generations: 16
max_completion_length: 8192
gradient_checkpointing: true
use_vllm: true
vllm_enable_sleep_mode: true
save_strategy: "no"
report_to: none
"""


@pytest.mark.parametrize(
    ("model", "per_device", "warns"),
    [
        ("Qwen/Qwen3-8B", 16, True),  # DDP: 8B state + 16 x 8.7k tokens of activations > 80 GB
        ("Qwen/Qwen3-0.6B", 4, False),
        ("tiny", 16, False),  # not a shipped config: no plan, no warning
    ],
)
def test_validate_warns_when_the_launch_hardware_does_not_fit(tmp_path, capsys, model, per_device, warns):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE + f"output_dir: {tmp_path / 'out'}\nper_device_train_batch_size: {per_device}\n")
    # the built-in tiny model has 512 positions: validate refuses the 8B recipe's 8192-token cap there
    fits = ["--max_completion_length", "256"] if model == "tiny" else []
    assert gspo_trl_main(["validate", str(recipe), "--model.name_or_path", model, *fits]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0].endswith("training rows)")
    warnings = [line for line in out if line.startswith("warning:")]
    assert len(warnings) == (1 if warns else 0), out
    if warns:
        assert "1 node(s) x 8 x 80 GB" in warnings[0] and "activations" in warnings[0]


def test_docs_plan_example_commands_run(capsys):

    doc = (ROOT / "docs" / "plan.md").read_text(encoding="utf-8")
    block = doc.split("```")[1]
    commands = [line.split()[2:] for line in block.splitlines() if line.startswith("gspo-trl plan ")]
    examples = [argv for argv in commands if "RECIPE" not in argv]
    assert examples, "docs/plan.md shows no runnable example"
    for argv in examples:
        assert run_plan(capsys, *argv)[0] == 0, argv


def test_old_config_spelling_plans_the_same_with_one_warning(capsys):
    """`plan --config` (now --accelerate-config: for `train`, --config is the recipe) still works."""
    argv = ["qwen3-1.7b/math", "--gpus-per-node", "2"]
    new = run_plan(capsys, *argv, "--accelerate-config", "configs/zero2.yaml")
    old = run_plan(capsys, *argv, "--config", "configs/zero2.yaml")
    assert new[0] == old[0] == 0
    assert "strategy  zero2 (--accelerate-config configs/zero2.yaml)" in new[1]
    assert old[1] == new[1] and "warning:" not in new[2]
    warnings = [line for line in old[2].splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "--accelerate-config" in warnings[0], old[2]


def test_plan_refuses_with_validates_line_and_never_suggests_a_refused_key(capsys, monkeypatch):
    """Staleness with sleep mode: `validate` refuses it, so the plan must too (it said FITS, 53 GiB),
    in validate's words; with sleep mode off the run needs 108% of an 80 GB GPU, and the plan's
    first fix was `vllm_enable_sleep_mode: true`, the refused key."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # validate's data check fails fast on this machine
    stale = ["qwen3-4b/math", "--engine.max_staleness", "1"]
    code, out, err = run_plan(capsys, *stale)
    assert code == 2 and "Verdict" not in out
    plan_lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(plan_lines) == 1 and "vllm_enable_sleep_mode: true" in plan_lines[0], err
    assert gspo_trl_main(["validate", *stale]) == 2
    validate_lines = capsys.readouterr().err.splitlines()
    assert plan_lines[0].replace("error: ", "") in "\n".join(validate_lines)
    code, out, err = run_plan(capsys, *stale, "--vllm_enable_sleep_mode", "false")
    assert code == 1 and "Verdict: DOES NOT FIT" in out, err
    verdict = out.split("Verdict")[1].split("\nLaunch")[0]  # the launch line repeats the user's keys
    assert "vllm_enable_sleep_mode" not in verdict


def test_plan_says_dynamic_sampling_multiplies_generation(capsys):
    """The plan timed one generation round per rollout batch whatever sampling.dynamic said."""
    code, out, _ = run_plan(
        capsys, "tiny/reversal", "--sampling.dynamic", "true", "--sampling.max_rounds", "4"
    )
    assert code == 0 and "each rollout batch runs up to 4 (sampling.max_rounds)" in out
    assert "2.4-2.9x the generated tokens" in out
