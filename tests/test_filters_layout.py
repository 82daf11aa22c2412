"""Filters judge a document on its prose: code, listings, tables and their rules are not repeated
lines, unpunctuated prose or non-Chinese text (stages/_layout.py); garbage is still caught."""

from __future__ import annotations

import re

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dataprep.document import Document, Drop
from stages._charclass import BatchChars
from stages._layout import BLANK_LINE, CODE_LINE, PROSE_LINE, TABLE_LINE, layout
from stages.filter_garbled import garbled_scores
from stages.filter_script import script_columns

try:  # tests/ may or may not be a package
    from ._cleaning_helpers import CLEANING, drop_reason, real_lines, run_stage
except ImportError:
    from _cleaning_helpers import CLEANING, drop_reason, real_lines, run_stage  # type: ignore[no-redef]

FILTERS = ["filter_script", "filter_punctuation", "filter_repetition", "filter_garbled"]
K = {BLANK_LINE: "B", PROSE_LINE: "P", CODE_LINE: "C", TABLE_LINE: "T"}

PROSE = (
    "在 systemd 下，内核和系统的信息都通过日志服务来记录，放在不变的二进制数据中，或放在变化的数据里。\n"
    "这些二进制日志数据，可以通过 journalctl 命令来访问。例如，你可以显示从最后一次启动以来的日志。\n\n"
    "系统日志工具可以被卸载。如果安装了它，它会改变它的行为来读取易失性二进制日志数据，并创建传统的日志文件。\n"
    "配置文件能够自定义日志文件和屏幕显示，也可以参见日志分析一节。"
)
ASCII_TABLE = """    表 5.5. 网络优化工具列表

    +----------------------------------------------------------+
    | 软件包  |  流行度  |大小|              说明              |
    |---------+----------+----+--------------------------------|
    |iftop    |V:6, I:113|93  |显示一个网络接口上的带宽使用信息|
    |---------+----------+----+--------------------------------|
    |iperf    |V:3, I:50 |349 |互联网协议带宽测量工具          |
    |---------+----------+----+--------------------------------|
    |ifstat   |V:0, I:8  |59  |接口统计监控                    |
    |---------+----------+----+--------------------------------|
    |bmon     |V:1, I:18 |144 |便携式带宽监视器和网速估计工具  |
    |---------+----------+----+--------------------------------|
    |ethstatus|V:0, I:4  |40  |快速测量网络设备吞吐的脚本      |
    +----------------------------------------------------------+"""
BOX_TABLE = """┌────────┬────────┬─────┬─────────────────┐
│ 软件包 │ 流行度 │大小 │      说明       │
├────────┼────────┼─────┼─────────────────┤
│mc      │V:65    │1434 │文本模式文件管理 │
├────────┼────────┼─────┼─────────────────┤
│vim     │V:95    │3743 │文本编辑器       │
├────────┼────────┼─────┼─────────────────┤
│sudo    │V:11    │1234 │权限管理         │
└────────┴────────┴─────┴─────────────────┘"""
MARKDOWN_TABLE = """| 模型名 | 参数量 | Template |
| ------ | ------ | -------- |
| BLOOM | 560M/1.1B/1.7B/3B/7.1B/176B | - |
| DeepSeek | 7B/16B/67B/236B | deepseek |
| Gemma | 2B/7B/9B/27B | gemma |"""
LISTING = """```bash
docker build -f ./docker/docker-cuda/Dockerfile \\
    --build-arg PIP_INDEX=https://pypi.org/simple \\
    --build-arg EXTRAS=metrics \\
    -t llamafactory:latest .

docker run -dit --ipc=host --gpus=all \\
    -p 7860:7860 \\
    -p 8000:8000 \\
    --name llamafactory \\
    llamafactory:latest

docker exec -it llamafactory bash
docker exec -it llamafactory bash
docker exec -it llamafactory bash
```"""
SHELL = """    # enable bash-completion
    if ! shopt -oq posix; then
      if [ -f /usr/share/bash-completion/bash_completion ]; then
        . /usr/share/bash-completion/bash_completion
      elif [ -f /etc/bash_completion ]; then
        . /etc/bash_completion
      fi
    fi
    export PATH="${PATH+$PATH:}/usr/sbin:/sbin"
    export EDITOR=vim"""
LONG_LISTING = (
    "```bash\n" + "\n".join(f"docker exec -it worker{i} bash -lc make" for i in range(40)) + "\n```"
)
LONG_TABLE = "\n".join(
    ["┌──────────────────────┬──────────────────────────────┐"]
    + [f"│软件包名称第{i}号     │这是一个用于测试的很长的说明文字│" for i in range(20)]
    + ["└──────────────────────┴──────────────────────────────┘"]
)
PROMPT = """    $ journalctl -b --system --user --unit ssh.service --follow --output short-precise
    -- Logs begin at Mon 2024-01-01 00:00:00 UTC, end at Mon 2024-01-01 01:00:00 UTC --
    Jan 01 00:00:01 host systemd[1]: Started OpenBSD Secure Shell server
    Jan 01 00:00:02 host sshd[123]: Server listening on 0.0.0.0 port 22"""


def kinds(text: str) -> str:
    """One letter per line of ``text``: B blank, P prose, C code, T table."""
    found = layout(BatchChars.of([text])).kinds_of(0)
    if found is None:
        return "".join("B" if not line.strip() else "P" for line in text.split("\n"))
    return "".join(K[k] for k in found.tolist())


def nonprose_text(text: str) -> str:
    """The characters of ``text`` that are no sentence characters (links, inline code too), in order."""
    lay = layout(BatchChars.of([text]))
    return "".join(text[i] for i in lay.not_sentence_chars.tolist())


def test_lines_are_classified() -> None:
    assert kinds(ASCII_TABLE) == "PB" + "T" * 13
    assert kinds(BOX_TABLE) == "T" * 9
    assert kinds(MARKDOWN_TABLE) == "T" * 5
    assert kinds(LISTING) == "C" * 16
    assert kinds(SHELL) == "C" * 10
    assert kinds(PROMPT) == "C" * 4
    assert kinds("说明如下：\n\n    LIBS = -lfoo -lbar\n\n以上。") == "PBCBP"
    # decorations and markup are judged as text
    assert kinds("+--------+\n| 特价优惠 |\n+--------+") == "PPP"  # a box drawn around text
    assert kinds("------------\n本期内容\n------------") == "PPP"  # rules standing alone
    assert kinds("~~~ How many messages do you get? ~~~\n回复即可\n~~~ 谢谢 ~~~") == "PPP"
    assert kinds("<td width=3D100>Buy now</td>\n<p>cheap</p>") == "PP"
    assert kinds("Content-Type: text/plain; charset=iso-8859-1\nHello there") == "PP"
    assert kinds("<details>\n<summary>不使用 Docker 构建</summary>\n</details>") == "CPC"
    # a Chinese line is never code outside a fence, whatever it holds
    assert kinds("x = 1\n设置 x = 1 即可\n") == "CPB"


def test_fences() -> None:
    assert kinds("说明：\n```\n程式碼\n```\n以上。") == "PCCCP"  # inside a fence, even Chinese
    assert kinds("```python\nprint(1)\n```") == "CCC"
    assert kinds("```\nx\n") == "PPB"  # an unclosed fence opens nothing
    # three backticks before a Chinese sentence are no fence: the lines stay text
    assert kinds("```很好的一本书，推荐。\n```很好的一本书，推荐。") == "PP"


def test_root_prompts_comments_and_headings() -> None:
    assert kinds("    # apt-get install foo\n    # systemctl restart foo") == "CC"
    # "# " before a capitalised word or a sentence with ", " is a comment or a heading, not a prompt
    assert kinds("# This file is licensed under the Apache License\nwhich you may read online") == "PP"
    assert kinds("# they are removed from the tarball, but are in git\nand kept here") == "PP"
    # "// words" is a comment of words; "//" before code is still code
    licence = "\n".join(
        [
            " // Redistribution and use in source and binary forms, with or without",
            " // modification, are permitted provided that the following conditions",
            " // are met:",
        ]
    )
    assert kinds(licence) == "PPP"
    assert kinds("// set the port\nlisten(8000);\nserve();") == "CCC"


def test_inline_code() -> None:
    lay = layout(BatchChars.of(["调用 `foo()` 与 `中文` 即可。"]))
    text = "调用 `foo()` 与 `中文` 即可。"
    assert "".join(text[i] for i in lay.inline.tolist()) == "`foo()`"  # a span of Chinese is text
    assert not len(lay.nonprose)


def test_links_and_inline_code_are_not_sentence_characters() -> None:
    text = "见 [文档](doc/a.md) 和 https://x.org/a?b=c 以及 `tokenized_path` 参数。"
    assert nonprose_text(text) == "(doc/a.md)https://x.org/a?b=c`tokenized_path`"
    assert nonprose_text(PROSE) == ""
    assert layout(BatchChars.of(["没有任何提示字符的一段普通中文。"])).kinds_of(0) is None


def test_a_table_is_not_repeated_lines() -> None:
    doc = PROSE + "\n\n" + ASCII_TABLE + "\n\n以上工具都可以用 apt 安装，详见各自的手册页。"
    assert drop_reason("filter_repetition", doc) is None
    assert drop_reason("filter_repetition", PROSE + "\n\n" + BOX_TABLE) is None
    # the same rules standing alone, around lines of text, are repeated lines
    spam = "\n".join(["+------------------------------+", "限时特价，点击领取优惠券"] * 6)
    assert drop_reason("filter_repetition", spam) == "repeated_lines"


def test_a_listing_is_not_no_punctuation() -> None:
    assert drop_reason("filter_punctuation", PROSE + "\n\n" + LONG_LISTING) is None
    assert drop_reason("filter_punctuation", PROSE + "\n\n" + LONG_TABLE) is None
    assert drop_reason("filter_punctuation", PROSE + "\n\n" + LISTING) is None
    assert drop_reason("filter_punctuation", PROSE + "\n\n" + SHELL + "\n\n" + PROMPT) is None
    assert drop_reason("filter_punctuation", PROSE + "\n\n" + ASCII_TABLE) is None
    assert drop_reason("filter_punctuation", PROSE + "\n\n" + MARKDOWN_TABLE) is None


def test_much_code_is_not_low_han_share_when_the_prose_is_chinese() -> None:
    doc = "\n\n".join(
        [PROSE, LISTING, SHELL, PROMPT, MARKDOWN_TABLE, "更多示例请参见 [示例](https://example.org/docs)。"]
    )
    (result,), _ = run_stage("filter_script", [doc], keep_scores=True)
    assert not isinstance(result, Drop)
    assert result.meta["scores"]["filter_script"]["han_share"] > 0.5
    # the same share of English in prose is still too much
    english = "This page explains how the build works and which options the tool takes. " * 30
    assert drop_reason("filter_script", PROSE + "\n" + english) == "low_han_share"


def test_garbage_is_still_caught() -> None:
    keywords = " ".join(
        ["手机", "电脑", "平板", "耳机", "音箱", "相机", "手表", "键盘", "鼠标", "显示器"] * 20
    )
    assert drop_reason("filter_punctuation", keywords) == "no_punctuation"
    nav = " | ".join(["首页", "新闻", "体育", "财经", "娱乐", "科技", "汽车", "房产", "教育", "旅游"] * 12)
    assert drop_reason("filter_punctuation", nav) == "no_punctuation"
    spam = "\n".join(["加微信领取优惠券，限时特价，错过不再！"] * 8 + ["欢迎咨询。", "联系我们。"])
    assert drop_reason("filter_repetition", spam) == "repeated_lines"
    # a table of repeated cells is still text in its cells for the Chinese share
    assert (
        drop_reason("filter_script", "| a | b |\n|---|---|\n| 1 | 2 |\n" + "buy cheap pills now " * 10)
        is None
    )


def test_inline_code_hides_no_garbage() -> None:
    """Inline code is no sentence and no repeated words, but it is no place to hide garbage either:
    a sentence goes on through it, and it is running text for the share of Chinese."""
    words = "".join(["甲乙丙丁戊己庚辛壬癸子丑寅卯辰巳午未申酉"[i % 20] for i in range(14 * 20)])
    run = words[:100] + " `x` " + words[100:] + " `y` " + words[::-1]
    assert drop_reason("filter_punctuation", run) == "no_punctuation"  # one stretch of garbage
    assert max(map(len, run.split(" `"))) < 300  # (each piece alone is short enough)
    linked = run.replace(" `x` ", " https://example.org/a ").replace(" `y` ", " http://b.example/c ")
    assert drop_reason("filter_punctuation", linked) == "no_punctuation"  # URLs do not end it either
    # a list of Markdown links is a list: each link target ends a stretch
    toc = "\n".join(f"- [{words[i : i + 20]}](#{words[i : i + 20]})" for i in range(0, 280, 20))
    assert drop_reason("filter_punctuation", toc) is None
    assert drop_reason("filter_punctuation", toc.replace("](#", "（").replace(")", "）")) == "no_punctuation"
    assert drop_reason("filter_punctuation", run.replace(" `x` ", "。").replace(" `y` ", "。")) is None
    names = " ".join(f"`{w}`" for w in ["abc_def", "x1y2z3"] * 10)
    backticked = "改了招牌以后第一次光顾，感觉没啥变化。" + names
    han = script_columns([backticked, backticked.replace("`", "")])["han_share"]
    assert han[0] == han[1] < 0.5
    assert drop_reason("filter_script", backticked) == "low_han_share"
    # options named again and again in a manual are no repetition
    option = "`--overwrite_cache --preprocessing_num_workers 16 --tokenized_path data/tokenized`"
    clauses = [c for c in re.split("[，。\n]", PROSE) if len(c) > 4]
    manual = "\n".join(f"{clause}，见 {option}。" for clause in clauses)
    assert drop_reason("filter_repetition", manual) is None
    assert drop_reason("filter_repetition", manual.replace("`", "")) == "repeated_ngrams"


def test_latin1_mojibake_is_caught_and_european_text_is_not() -> None:
    moji = PROSE.encode("utf-8").decode("cp1252", "replace")
    assert garbled_scores(moji)["latin1_mojibake_share"] > 0.5
    assert drop_reason("filter_garbled", moji) == "mojibake"
    gbk = PROSE.encode("gbk").decode("latin-1")
    assert drop_reason("filter_garbled", gbk) == "mojibake"
    french = "Le café était fermé, mais l'élève a trouvé une crème brûlée à côté de la forêt. " * 3
    german = "Die Größe der Übergänge hängt von der Straßenführung ab; öffentliche Äußerungen fehlen. " * 3
    for text in (french, german):
        assert garbled_scores(text)["latin1_mojibake_share"] == 0.0
        assert drop_reason("filter_garbled", text) is None


# --- properties -------------------------------------------------------------------------------

GOOD = [*real_lines("poem"), *real_lines("review"), PROSE]
CODE_WORDS = ["docker", "run", "-p", "8000:8000", "--name", "x", "$HOME", "ls", "-la", "/usr/bin", "a=1"]


def _code_block(draw: st.DrawFn) -> str:
    lines = draw(
        st.lists(st.lists(st.sampled_from(CODE_WORDS), min_size=1, max_size=8), min_size=1, max_size=12)
    )
    body = "\n".join(" ".join(words) for words in lines)
    return f"```bash\n{body}\n```"


def _table(draw: st.DrawFn) -> str:
    cols = draw(st.integers(2, 4))
    rows = draw(
        st.lists(
            st.lists(
                st.sampled_from(["V:0", "I:12", "软件包", "说明", "1434", "x"]), min_size=cols, max_size=cols
            ),
            min_size=2,
            max_size=10,
        )
    )
    rule = "+" + "+".join("-" * 10 for _ in range(cols)) + "+"
    out = [rule]
    for row in rows:
        out.append("|" + "|".join(cell.ljust(10) for cell in row) + "|")
        out.append(rule)
    return "\n".join(out)


@st.composite
def good_document_with_blocks(draw: st.DrawFn) -> tuple[str, str]:
    base = draw(st.sampled_from(GOOD))
    paragraphs = base.split("\n\n")
    for _ in range(draw(st.integers(1, 3))):
        block = _code_block(draw) if draw(st.booleans()) else _table(draw)
        paragraphs.insert(draw(st.integers(0, len(paragraphs))), block)
    return base, "\n\n".join(paragraphs)


@settings(max_examples=60, deadline=None)
@given(good_document_with_blocks())
def test_adding_code_or_a_table_never_makes_a_filter_drop_a_good_document(pair: tuple[str, str]) -> None:
    base, doc = pair
    for name in FILTERS:
        if drop_reason(name, base) is None:
            assert drop_reason(name, doc) is None, name


def _decisions(texts: list[str], sizes: list[int]) -> list[str]:
    """Each document's fate through the cleaning chain, run in batches of the given sizes."""
    from pathlib import Path

    from dataprep.stage import StageContext, build_params, get
    from dataprep.stats import StageStats

    stages = []
    for name in CLEANING:
        cls = get(name)
        stages.append(cls(build_params(cls.Params, {}, name)))
    out: list[str] = []
    start = 0
    for size in [*sizes, len(texts)]:
        batch = [Document(id=str(i), text=t) for i, t in enumerate(texts[start : start + size], start)]
        start += size
        fate = {d.id: "kept" for d in batch}
        for stage in stages:
            ctx = StageContext(stats=StageStats(), work_dir=Path("."))
            kept = []
            for r in stage.process(batch, ctx):
                if isinstance(r, Drop):
                    fate[r.doc.id] = f"{stage.name}/{r.reason}/{r.score!r}"
                else:
                    kept.append(r)
            batch = kept
        out += [fate[str(i)] for i in range(start - size, min(start, len(texts)))]
        if start >= len(texts):
            break
    return out


MIXED = [
    PROSE,
    PROSE + "\n\n" + ASCII_TABLE,
    "\n".join(["+------------------------------+", "限时特价，点击领取优惠券"] * 6),
    PROSE + "\n\n" + LISTING,
    PROSE.encode("utf-8").decode("cp1252", "replace"),
    "、".join(["手机", "电脑", "平板"] * 60),
    PROSE + "\n\n" + BOX_TABLE + "\n见 https://example.org/a 与 `x`。",
    *real_lines("review"),
]


@settings(max_examples=25, deadline=None)
@given(st.permutations(MIXED), st.lists(st.integers(1, 6), min_size=1, max_size=4))
def test_decisions_do_not_depend_on_the_batch(texts: list[str], sizes: list[int]) -> None:
    alone = [_decisions([t], [])[0] for t in texts]
    assert _decisions(texts, sizes) == alone


def test_layout_survives_a_filter_dropping_documents() -> None:
    texts = [t for t in MIXED for _ in range(2)]
    bc = BatchChars.of(texts)
    full = layout(bc)
    keep = np.array([i % 3 != 1 for i in range(len(texts))])
    kept = [t for t, k in zip(texts, keep, strict=True) if k]
    narrowed = bc.subset(keep, kept).__dict__["layout"]
    fresh = layout(BatchChars.of(kept))
    assert full is not narrowed
    for name in ("nonprose", "links", "inline", "line_doc", "line_start", "line_kind"):
        assert np.array_equal(getattr(narrowed, name), getattr(fresh, name)), name
