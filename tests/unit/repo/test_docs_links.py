"""Every relative link and image in the README and in docs/ points at a file of the repository (a page that moved
into docs/ took its links along)."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def relative_links(page: Path) -> list[str]:
    """The page's link targets that are paths in the repository (no scheme, no bare #anchor), anchors dropped."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # code blocks hold no links
    targets = (m.group(1) for m in LINK.finditer(text))
    return [t.split("#", 1)[0] for t in targets if not re.match(r"[a-z]+:", t) and not t.startswith("#")]


def test_the_pages_link_to_each_other():
    readme = relative_links(ROOT / "README.md")
    assert len(PAGES) >= 10 and {"docs/performance.md", "docs/tracking.md", "docs/clusters.md"} <= set(readme)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    missing = [t for t in relative_links(page) if not (page.parent / t).exists()]
    assert missing == [], f"{page.relative_to(ROOT)} links to files that are not there: {missing}"


def test_a_missing_target_is_found(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("see [here](gone.md#x), [web](https://example.org), [top](#a), ![pic](img.png)\n```\n[no](x)\n```")
    assert relative_links(page) == ["gone.md", "img.png"]
