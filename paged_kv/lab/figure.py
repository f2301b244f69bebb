"""The figure every picture of the course is drawn on, its colours, and the font its texts need.

``CourseFigure`` is a ``matplotlib.figure.Figure`` that renders itself as a PNG: a notebook shows it when it is the
last expression of a cell or through ``IPython.display.display``, in JupyterLab, Colab and static viewers alike,
without pyplot and without being shown twice. ``fig.savefig(path)`` writes a PNG file.

matplotlib's own font (DejaVu Sans) has no Chinese glyphs, and Colab's or ModelScope's images may have no CJK font
at all: in Chinese (``paged_kv.lab.i18n``), a figure adds the CJK font the package ships (``fonts/``: a subset of
Noto Sans CJK SC, under the SIL Open Font License) to the end of matplotlib's font families (``font.family``:
matplotlib falls back from one family of that list to the next for a character the first lacks), so that Latin
text keeps DejaVu Sans and each Chinese character is drawn with the shipped font.
"""

from __future__ import annotations

from io import BytesIO
from pathlib import Path

from matplotlib import patheffects
from matplotlib.figure import Figure

from paged_kv.lab.i18n import SOURCE, language

FONT_FILE = Path(__file__).resolve().with_name("fonts") / "course-cjk-sans-sc.otf"
FONT_FAMILY = "PagedKV CJK Sans SC"  # the family name the shipped subset declares (tools/cjk_font.py)

FREE_COLOR = "#e6e6e6"
CACHED_FREE_COLOR = "#c9e4f2"
SHARED_EDGE = "#000000"
TAIL_HATCH = "////"  # the unfilled tail of a last block
PALETTE = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c", "#ccb974", "#64b5cd"]
# Dark text with a white outline, for numbers drawn over coloured bars.
_HALO = [patheffects.withStroke(linewidth=1.8, foreground="white")]
_registered = False


def use_course_font() -> bool:
    """In a language other than English, make the shipped CJK font matplotlib's last fallback family
    (registered once; English figures are left exactly as they are). Returns whether it is in use."""
    global _registered
    if language() == SOURCE:
        return False
    from matplotlib import font_manager, rcParams

    if not _registered:
        font_manager.fontManager.addfont(str(FONT_FILE))
        _registered = True
    families = list(rcParams["font.family"])
    if FONT_FAMILY not in families:
        rcParams["font.family"] = families + [FONT_FAMILY]
    return True


def families(first: str) -> list:
    """A text's font families: ``first`` (``"monospace"``...), then the shipped CJK font where it is in use."""
    return [first, FONT_FAMILY] if use_course_font() else [first]


class CourseFigure(Figure):
    """A Figure that notebooks display as a PNG image (``_repr_png_``), with no pyplot involved; in Chinese,
    its texts have the shipped CJK font (``use_course_font``)."""

    def __init__(self, *args, **kwargs):
        use_course_font()
        super().__init__(*args, **kwargs)

    def _repr_png_(self) -> bytes:
        buffer = BytesIO()
        self.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
        return buffer.getvalue()


def _color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]
