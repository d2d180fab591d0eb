"""Checks on `claw rl` metrics files (JSONL, one record per step).

    rl_check.py equal REF GOT NAME [--exact|--tol X]
                                               the same rewards, losses and grad
                                               norms step by step (2e-5 relative,
                                               or X; the loss on the scale of its
                                               terms; or bitwise with --exact)
    rl_check.py staleness FILE K NAME [--ahead]
                                               every step's trajectory age <= K;
                                               --ahead: the generators ran ahead
                                               (age K at some step)
    rl_check.py mismatch FILE TOL NAME [--exact|--mean]
                                               on-policy tokens were compared at
                                               every step, and the generator's
                                               and learner's log-probabilities
                                               agree to TOL (absolute, every
                                               token); --exact: bitwise; --mean:
                                               TOL on average (a learner in
                                               other kernels: no --learner-batch-invariant)
    rl_check.py env FILE STEPS NAME            an external environment's run: every
                                               step trained, episodes that hung or
                                               failed were counted (some of each),
                                               some took several turns, and every
                                               earlier reply was found and learned
"""
import json
import sys


def records(path):
    return [json.loads(line) for line in open(path)]


def main():
    mode = sys.argv[1]
    if mode == "equal":
        ref, got, name = records(sys.argv[2]), records(sys.argv[3]), sys.argv[4]
        exact = "--exact" in sys.argv
        tol = float(sys.argv[sys.argv.index("--tol") + 1]) if "--tol" in sys.argv else 2e-5
        assert len(ref) == len(got) and ref, f"{name}: {len(got)} records against {len(ref)}"
        worst = 0.0
        for a, b in zip(ref, got):
            assert a["step"] == b["step"], (a["step"], b["step"])
            # GRPO's loss is a cancellation (a group's advantages sum to zero)
            # of token terms of order 1e-2 and more: it is compared on that
            # scale, the KL on 1e-3; rewards come from the same samples.
            for k, floor in (("reward", 1.0), ("loss", 1e-2), ("grad_norm", 0.0), ("kl", 1e-3),
                             ("clip_fraction", 1.0), ("eval_reward", 1.0)):
                if k not in a:
                    continue
                if exact:
                    assert a[k] == b[k], f"{name} step {a['step']}: {k} {b[k]!r} vs {a[k]!r} (must be bitwise equal)"
                    continue
                d = abs(a[k] - b[k]) / max(abs(a[k]), floor, 1e-30)
                worst = max(worst, d)
                assert d <= tol, f"{name} step {a['step']}: {k} {b[k]} vs {a[k]} (tolerance {tol})"
        assert any(r["grad_norm"] > 0 for r in ref), f"{name}: no step had a gradient (all rewards equal)"
        print(f"ok {name}: {len(got)} steps {'bitwise equal' if exact else f'worst relative difference {worst:.1e}'}"
              f" (last reward {got[-1]['reward']:.4f}, loss {got[-1]['loss']:.6f})")
    elif mode == "staleness":
        recs, k, name = records(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
        ages = [r["staleness_max"] for r in recs]
        assert all(a <= k for a in ages), f"{name}: trajectory ages {ages} exceed --max-staleness {k}"
        if "--ahead" in sys.argv:
            assert max(ages) == k, f"{name}: ages {ages}: the generators never ran ahead"
        print(f"ok {name}: ages per step {ages} (max staleness {k})")
    elif mode == "mismatch":
        recs, tol, name = records(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
        assert all(r["on_policy_tokens"] > 0 for r in recs), f"{name}: a step without on-policy tokens"
        tokens = sum(r["on_policy_tokens"] for r in recs)
        over = sum(r["logprob_mismatch_over_1e-5"] for r in recs)
        worst_mean = max(r["logprob_mismatch_mean"] for r in recs)
        worst = max(r["logprob_mismatch_max"] for r in recs)
        # --learner-batch-invariant: the learner's forward runs the engine's
        # kernels, and one learner rank (or DP, or PP, which split no sum)
        # gives the generator's figures to the bit; TP sums each product in
        # parts. Without it, BLAS and flash attention: fp32 rounding apart.
        limit = 0.0 if "--exact" in sys.argv else tol
        held = worst_mean if "--mean" in sys.argv else worst
        assert held <= limit, (
            f"{name}: generator and learner log-probabilities differ by up to {worst:.2e} (tolerance {limit}; "
            f"{worst_mean:.2e} on average, {over:.0f} of {tokens:.0f} tokens beyond 1e-5)")
        print(f"ok {name}: generator vs learner log-probabilities over {tokens:.0f} tokens: mean |difference| "
              f"<= {worst_mean:.2e} per step, max {worst:.2e}{' (bitwise equal)' if worst == 0 else ''}")
    elif mode == "env":
        recs, steps, name = records(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
        assert [r["step"] for r in recs] == list(range(1, steps + 1)), f"{name}: steps {[r['step'] for r in recs]}"
        timeouts = sum(r["env_timeouts"] for r in recs)
        errors = sum(r["env_errors"] for r in recs)
        turns = max(r["env_turns"] for r in recs)
        unaligned = sum(r["env_unaligned_turns"] for r in recs)
        assert timeouts >= 1, f"{name}: no episode timed out (the environment hangs some on purpose)"
        assert errors >= 1, f"{name}: no episode failed (the environment fails some on purpose)"
        assert turns > 1, f"{name}: no episode took more than one turn"
        assert unaligned == 0, f"{name}: {unaligned} earlier replies were not found in the later prompts"
        assert any(r["grad_norm"] > 0 for r in recs), f"{name}: no step had a gradient"
        print(f"ok {name}: {steps} steps trained; {timeouts} episodes timed out and {errors} failed (counted, "
              f"dropped); up to {turns:.2f} replies an episode, all learned")
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
