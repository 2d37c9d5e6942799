"""``python -m guardjit advise --html/--plot/--from-json`` (guardjit/advise_report.py,
docs/advise.md): a real report rendered to HTML, PNG and SVG; the page
parses, names every side and verdict and escapes the report's strings;
reports with more sides and fields, or with gaps, still render; the command
line end to end and its errors."""

from __future__ import annotations

import copy
import html.parser
import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import matplotlib.image
import pytest
import torch
from torch import nn

import guardjit.advise
from guardjit import advise_report
from guardjit.advise import Settings

from advise_cases import Block

SCALE = 1.5  # a global the model reads: its guards' group is G['SCALE'], with quotes

TINY = Settings(rounds=2, profile_calls=4, target_ms=0.1, depth=2, groups=1, changes=4)


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Block(), Block()])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x * SCALE


@pytest.fixture(scope="module")
def report() -> dict:
    torch.manual_seed(0)
    return guardjit.advise(Model().eval(), (torch.randn(2, 4),), name="tiny", settings=TINY)


class Page(html.parser.HTMLParser):
    """The page's text (entities decoded), its tags, and whether every
    table element opened was closed in order."""

    NESTED = ("html", "head", "body", "table", "tr", "td", "th", "ul", "li", "code", "span",
              "h1", "h2", "h3", "p", "small", "title", "style")

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text: list[str] = []
        self.tags: list[tuple[str, dict]] = []
        self.stack: list[str] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag in self.NESTED:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in self.NESTED:
            assert self.stack and self.stack[-1] == tag, (tag, self.stack[-5:])
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _parse(path) -> Page:
    page = Page(path.read_text(encoding="utf-8"))
    assert not page.stack, page.stack
    return page


def test_html_names_every_side_and_verdict_and_escapes(report, tmp_path):
    out = tmp_path / "advise.html"
    advise_report.html(report, str(out))
    raw = out.read_text(encoding="utf-8")
    page = _parse(out)
    text = " ".join(page.text)
    for name in report["sides"]:
        assert name in text, name
    for name, o in report["unsafe"]["options"].items():
        assert name in text and o["verdict"] in text, name
    assert report["torch_version"] in text
    for key in report["settings"]:
        assert f"settings: {key}" in text
    for sentence in advise_report.verdicts(report):
        assert sentence in text
    # The global's guard source carries quotes: escaped in the file, intact as text.
    groups = {g["group"] for u in report["guards"]["units"] for g in u["groups"]}
    assert "G['SCALE']" in groups, groups
    assert "G['SCALE']" in text and "G['SCALE']" not in raw and "G[&#x27;SCALE&#x27;]" in raw
    # The plot is inline: one image, a PNG in a data URL, nothing fetched.
    imgs = [a for t, a in page.tags if t == "img"]
    assert len(imgs) == 1 and imgs[0]["src"].startswith("data:image/png;base64,")
    assert not [a for t, a in page.tags if t in ("script", "link")]
    assert not any(a.get("src", "").startswith(("http", "//")) for _, a in page.tags)


def test_html_escapes_every_string_it_is_given(report, tmp_path):
    evil = '<script>alert("x")</script> & \'q\''
    r = copy.deepcopy(report)
    r["model"] = evil
    r["sides"]["torch"] = {"status": "error", "error": evil}
    r["unsafe"]["changes"][0]["source"] = evil
    r["unsafe"]["changes"][0]["eager_error"] = evil * 5  # cut, the whole text in a title
    opt = next(iter(r["unsafe"]["options"].values()))
    opt["verdict"] = evil
    opt["bites"] = [{"change": evil, "source": evil, "shown": evil,
                     "dropped_guards_on_source": [evil]}]
    r["guards"]["units"][0]["groups"][0]["group"] = evil
    r["guards"]["units"][0]["groups"][0]["kinds"] = {evil: 1}
    out = tmp_path / "evil.html"
    advise_report.html(r, str(out))
    raw = out.read_text(encoding="utf-8")
    assert "<script" not in raw and 'alert("x")' not in raw
    page = _parse(out)
    assert not [t for t, _ in page.tags if t == "script"]
    assert " ".join(page.text).count(evil) >= 6
    titles = [a["title"] for t, a in page.tags if "title" in a]
    assert evil * 5 in titles


def test_plot_png_and_svg(report, tmp_path):
    png = tmp_path / "advise.png"
    advise_report.plot(report, str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    image = matplotlib.image.imread(str(png))
    assert image.ndim == 3 and image.shape[0] > 200 and image.shape[1] > 200
    assert image[..., :3].min() < 0.5  # something is drawn on the white
    svg = tmp_path / "advise.svg"
    advise_report.plot(report, str(svg))
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")
    with pytest.raises(ValueError, match="png, svg, pdf"):
        advise_report.plot(report, str(tmp_path / "advise.jpg"))


def test_more_sides_fields_and_gaps_still_render(report, tmp_path):
    """The lead's further sides (guardjit with an option, a pre-graph time,
    more per-group counts), a side that failed, and fields missing or None."""
    r = copy.deepcopy(report)
    combined = "guardjit+use_recursive_dict_tags_for_guards"
    r["sides"][combined] = {"status": "ok", "pregraph_us": 3.5, "lookup_us": None,
                            "check_us": 1.25, "call_us": 400.0}
    r["sides"]["torch"]["pregraph_us"] = 12.0
    r["sides"]["skip_guard_eval_unsafe"] = {"status": "error", "error": "boom"}
    r["sides"]["install_free_tensors+skip_guard_on_all_nn_modules_unsafe"] = {"status": "error"}
    group = r["guards"]["units"][0]["groups"][0]
    group["hasattr_probes"] = 7
    group["cost_us"] = float("nan")
    del r["guardjit_vs_options"]
    r["wall_s"] = None
    r["layers"] = {"container": None, "count": None, "guards_per_layer": None}
    r["unsafe"]["options"]["guardjit"]["verdict"] = None
    r["unsafe"]["changes"][0]["sides"]["torch"] = None
    assert advise_report.measures(r)[0] == "pregraph_us"
    out = tmp_path / "more.html"
    advise_report.html(r, str(out))
    text = " ".join(_parse(out).text)
    assert combined in text and "pre-graph bytecode µs" in text and "hasattr_probes" in text
    assert "boom" in text
    advise_report.plot(r, str(tmp_path / "more.png"))
    assert matplotlib.image.imread(str(tmp_path / "more.png")).size > 0
    # Nearly nothing: still a page and a figure.
    bare = {"schema": guardjit.advise.SCHEMA, "sides": {"torch": {"status": "error"}}}
    advise_report.html(bare, str(tmp_path / "bare.html"))
    assert "torch" in " ".join(_parse(tmp_path / "bare.html").text)
    advise_report.plot(bare, str(tmp_path / "bare.svg"))
    assert ET.parse(tmp_path / "bare.svg").getroot().tag.endswith("svg")


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "guardjit", "advise", *args],
                          capture_output=True, text=True, timeout=600)


def test_cli_html_plot_and_from_json(tmp_path):
    j, h, p = tmp_path / "a.json", tmp_path / "a.html", tmp_path / "a.png"
    r = _cli("guardjit.models:two_input_mlp", "--quick", "--no-progress", "--groups", "1",
             "--changes", "2", "--rounds", "2", "--json", str(j), "--html", str(h),
             "--plot", str(p))
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(j.read_text())
    text = " ".join(_parse(h).text)
    assert all(name in text for name in report["sides"])
    assert matplotlib.image.imread(str(p)).size > 0
    # Rendered again from the JSON, measuring nothing: the same table, a new page and an SVG.
    h2, s2 = tmp_path / "b.html", tmp_path / "b.svg"
    again = _cli("--from-json", str(j), "--html", str(h2), "--plot", str(s2))
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.splitlines()[:8] == r.stdout.splitlines()[:8]
    assert " ".join(_parse(h2).text) == text
    assert ET.parse(s2).getroot().tag.endswith("svg")


def test_cli_from_json_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "guardjit-advise/1", ')
    other = tmp_path / "other.json"
    other.write_text('{"schema": "guardjit-bench/1"}')
    for path, words in ((tmp_path / "missing.json", "cannot read"), (bad, "is not JSON"),
                        (other, "is not a guardjit advise report")):
        r = _cli("--from-json", str(path), "--html", str(tmp_path / "x.html"))
        assert r.returncode == 2 and words in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
        assert not (tmp_path / "x.html").exists()
    for args, words in ((["guardjit.models:cnn", "--from-json", str(bad)], "MODULE:FACTORY or"),
                        (["--from-json", str(bad), "--quick"], "do not apply"),
                        (["--from-json", str(bad), "--plot", str(tmp_path / "x.jpg")], ".svg")):
        r = _cli(*args)
        assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr, r.stderr
