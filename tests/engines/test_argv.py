"""The one command-line tokenizer: flags, values, switches, aliases, negative numbers, dotted flags."""

from servelab.engines.argv import (
    Arg,
    FlagSet,
    canonical,
    flag_set,
    flag_values,
    merged,
    parse,
    render,
    without,
)


def pairs(args: list[Arg]) -> list[tuple[str | None, str | None]]:
    return [(a.name, a.value) for a in args]


def test_values_equals_and_negative_numbers():
    args = parse(["--seed", "-1", "--temperature=-0.5", "--tp", "8", "--flag"])
    assert pairs(args) == [("--seed", "-1"), ("--temperature", "-0.5"), ("--tp", "8"), ("--flag", None)]
    assert render(args) == ["--seed", "-1", "--temperature=-0.5", "--tp", "8", "--flag"]


def test_underscores_and_aliases_fold_into_one_name():
    assert canonical("--max_num_seqs=8") == "--max-num-seqs"
    assert canonical("-tp", {"-tp": "--tensor-parallel-size"}) == "--tensor-parallel-size"
    # in a dotted flag only the part before the dot is the flag's name; the key keeps its spelling
    assert (
        canonical("--attention_config.use_fp4_indexer_cache=True")
        == "--attention-config.use_fp4_indexer_cache"
    )


def test_switches_keep_the_next_word_positional_and_valued_flags_take_a_dash():
    switches = flag_set("--trust-remote-code", prefixes=("--enable-",), exceptions=("--enable-x-list",))
    args = parse(
        ["--trust-remote-code", "model", "--enable-foo", "word", "--enable-x-list", "a"], switches=switches
    )
    assert pairs(args) == [
        ("--trust-remote-code", None),
        (None, "model"),
        ("--enable-foo", None),
        (None, "word"),
        ("--enable-x-list", "a"),
    ]
    valued = FlagSet(frozenset({"--stop"}), dotted=True)
    args = parse(["--stop", "-x", "--cfg.mode", "--y", "--z"], valued=valued)
    assert pairs(args) == [("--stop", "-x"), ("--cfg.mode", "--y"), ("--z", None)]


def test_a_flag_given_twice_keeps_its_last_value_and_merge_and_drop_work_by_name():
    args = parse(["--a", "1", "--a", "2"])
    assert flag_values(args) == {"--a": "2"}
    base = parse(["m", "--x", "1", "--y"])
    assert render(merged(base, parse(["--x=3", "--z", "-4", "word"]))) == [
        "m",
        "--x",
        "1",
        "--y",
        "--z",
        "-4",
    ]
    assert render(without(base, {"--x"})) == ["m", "--y"]
