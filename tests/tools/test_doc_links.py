"""Every relative link of README.md and the Markdown files under docs/ resolves: the file exists and, for a link with a
#fragment, the target has a heading with that anchor (GitHub's slugs). Links into code spans and
fenced blocks are not links; http(s) and mailto links are not followed."""
import glob
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.MULTILINE)


def prose(text: str) -> str:
    """The text without fenced blocks and code spans, where brackets are not links."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: markup dropped, lower case, punctuation removed, spaces to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path: str) -> set[str]:
    seen, result = {}, set()
    for heading in HEADING.findall(FENCE.sub("", open(path, encoding="utf-8").read())):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def broken_links(path: str) -> list[str]:
    broken = []
    for target in LINK.findall(prose(open(path, encoding="utf-8").read())):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, fragment = target.partition("#")
        resolved = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
        if not os.path.exists(resolved):
            broken.append(f"{target}: no such file")
        elif fragment and resolved.endswith(".md") and fragment not in anchors(resolved):
            broken.append(f"{target}: no heading with anchor #{fragment} in {os.path.relpath(resolved, ROOT)}")
    return broken


@pytest.mark.parametrize("path", DOCS, ids=lambda p: os.path.relpath(p, ROOT))
def test_every_relative_link_resolves(path):
    assert broken_links(path) == [], f"{os.path.relpath(path, ROOT)} has broken links"


def test_the_check_sees_a_broken_file_and_anchor(tmp_path):
    (tmp_path / "other.md").write_text("# Title\n\n## A `code` heading (with) punctuation\n", encoding="utf-8")
    doc = tmp_path / "doc.md"
    doc.write_text("[ok](other.md#a-code-heading-with-punctuation) [self](#here) `[not a link](gone.md)`\n"
                   "## Here\n[gone](gone.md) [bad anchor](other.md#nowhere) [web](https://example.com/x)\n"
                   "```\n[in a fence](gone2.md)\n```\n", encoding="utf-8")
    assert broken_links(str(doc)) == ["gone.md: no such file", "other.md#nowhere: no heading with anchor #nowhere in "
                                      + os.path.relpath(str(tmp_path / "other.md"), ROOT)]
