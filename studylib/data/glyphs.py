"""The embedded default data set: an Omniglot-like glyph set rendered from the fonts matplotlib installs.

Nothing is downloaded. A *class* is one Unicode character; its *instances* are the character drawn in the
font faces that contain it, each under random "drawer" variation, the way Omniglot's 20 drawers per
character vary (seed 000 uses Omniglot as its small benchmark). The 16 faces are DejaVu Sans, Sans Mono,
Serif and STIX General in their regular, bold, italic/oblique and bold-italic styles
(``matplotlib/mpl-data/fonts/ttf``); they cover Latin, Greek, Cyrillic, Armenian, Georgian and many symbol
blocks (Hebrew, Arabic and others exist in too few faces to pass :data:`MIN_FACES`).

Pipeline (all float work on the CPU in float64, so the arrays do not depend on the machine):

1. **Clean rendering.** Each (character, face) is rasterised once with ``matplotlib.ft2font.FT2Font``
   (``load_char`` / ``draw_glyph_to_bitmap``, the per-glyph form of ``set_text`` /
   ``draw_glyphs_to_bitmap``; no hinting) at twice the target size, em size :data:`EM_FRACTION` of the
   canvas, placed typographically (advance box centred, baseline :data:`BASELINE` em below the centre, so
   Braille dots 1-2-3 and 4-5-6 stay apart); glyphs whose ink box exceeds :data:`FIT_FRACTION` of the
   canvas are rendered smaller, and shifted inside the margins; a rendering whose ink box is under
   :data:`MIN_INK_FRACTION` of the canvas (dots, commas, accents alone) or empty does not count as a face.
2. **Candidates.** Unicode category letter, number, symbol or punctuation (no whitespace, control, format,
   combining marks, private use, unassigned), not a compatibility *style* variant of another character
   (decomposition tag ``<font>`` (mathematical bold/italic/script A...), ``<super>``, ``<sub>``, ``<wide>``,
   ``<narrow>``, ``<small>``, ``<vertical>``, ``<noBreak>``: Unicode itself says these are another
   character drawn differently), and a valid rendering in at least :data:`MIN_FACES` faces.
3. **Deduplication by rendering** (the two traps of ``shared/README.md``). The *class mean* is the mean,
   over its faces, of the clean renderings at the reference size 28x28 (intensities in [0, 1]); the distance
   of two classes is the RMS pixel difference of their means, ``||m_a - m_b||_2 / 28``. Classes are visited
   greedily and a class is dropped when its distance to an already kept class is below
   :data:`DEDUP_THRESHOLD`. Visiting order: fewer code points in the canonical decomposition first (base
   letters beat their accented forms: Greek Omega survives, not Omega with tonos), then code point (Latin A
   survives, not Greek Alpha or Cyrillic A).
   The rule is the same for every ``size``/``rgb``, so all variants share one class list.
4. **Drawer variation**, batched in torch: stroke width (a random blend of the glyph with its 3x3 dilation
   or, more gently, its 3x3 erosion, computed as integer max/min filters), then one ``grid_sample`` at the
   output size from the 2x2-box-prefiltered supersampled rendering through a random affine map (rotation,
   zoom, anisotropy, shear, translation) plus a smooth random displacement field (uniform noise on a 5x5
   grid, bicubically upsampled: elastic distortion). Ranges: :data:`ROTATION_DEG`, :data:`ZOOM`, ...
   Every class draws its random numbers from its own CPU generator seeded by ``(seed, code point)``, so a
   class looks the same whether it is generated alone (``max_classes``) or with all others.
   Instance ``i`` of a class uses face ``perm[i % F]`` of its ``F`` faces (``perm`` a random permutation),
   so a character in fewer faces than ``instances`` gets several variations per face and every class has
   exactly ``instances`` images.

Images are uint8 ``[N, C, size, size]`` with bright ink (255) on a dark background (0), like MNIST and the
usual inverted Omniglot. With ``rgb=True`` each instance gets a random background colour and a foreground
colour whose every channel differs from the background's by 0.3..0.7 (circularly), for methods whose
augmentations act on colour.

Measured numbers (matplotlib 3.11.2, torch 2.15, unicodedata 14.0.0; :func:`dedup_report`):

* 3,023 candidate characters exist in >= 8 faces; 72 of them are blank or tiny in too many faces;
  1,033 of the remaining 2,951 are dropped as near-duplicates; **1,918 classes** remain, in 36 alphabets
  (Latin 467, Braille 247, Mathematical Operators 160, Greek 117, Cyrillic 116, Georgian 113, ...).
* Choosing the threshold: classes kept at thresholds 0.02 / 0.04 / 0.06 / 0.08 / 0.10 / 0.12 were
  2,868 / 2,635 / 2,298 / 1,918 / 1,545 / 1,098. Nearest-earlier-neighbour pairs below 0.02 are pure
  homoglyphs (Cyrillic dze/Latin s 0.004, Greek Epsilon/Latin E 0.001, Cyrillic Pe/Greek Pi 0.010) and
  Greek breathing marks (eta with dasia/psili 0.019); 0.02-0.06 holds diacritic-only pairs (n caron/n
  acute 0.037, e dot above/e acute 0.038, s caron/s acute 0.044) and near-homoglyphs across face sets
  (division slash/solidus 0.022, Cyrillic ka/Latin kra 0.026); 0.06-0.08 small marks that a 1-pixel
  elastic distortion or a stroke-width change hides (c cedilla/c 0.072, N cedilla/N 0.061, Cyrillic Ka
  with descender/Ka 0.074); from 0.08 up differences are a stroke or more (Z with stroke/Z 0.086, arrow
  to bar/arrow 0.083, Braille patterns one dot apart 0.105). **Rule: DEDUP_THRESHOLD = 0.08**, i.e. two
  classes must differ by about five fully inked pixels of the 28x28 mean (``sqrt(5/784) = 0.080``).
  Kept classes: minimum nearest-neighbour distance 0.0800, median 0.106.
* Time, measured on the 2-core development machine while other jobs ran (load average 3-5): the full
  default set from scratch (class scan of ~37k glyph renderings + 38,360 images at 28x28) took 34 s wall
  (38 s of CPU for this and an RGB generation together); the RGB set afterwards 25 s; a cache hit 0.5 s.

Determinism: uniform draws only from per-class CPU generators, integer arithmetic where possible (class
means, stroke filters), float64 elsewhere, so kernel-level rounding differences between CPUs cannot
realistically flip a uint8 output; the cache key holds GENERATOR_VERSION and the matplotlib, torch and
unicodedata versions.

Why written here rather than with a library: no library renders a glyph set like this; the sampling grid
is built directly (two broadcast adds and one matmul for the elastic field instead of ``affine_grid`` plus
``upsample_bicubic2d``, several times faster on CPU), then one ``grid_sample`` per chunk of classes.
"""

from __future__ import annotations

import functools
import io
import time
import unicodedata
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from studylib.data.base import DataError, FewShotDataset, ImageSplit
from studylib.utils import atomic_write_bytes, config_hash, default_cache_dir

GENERATOR_VERSION: str = "1"

# The 16 faces: DejaVu Sans, Sans Mono, Serif and STIX General, four styles each.
FACE_FILES: tuple[str, ...] = (
    "DejaVuSans.ttf", "DejaVuSans-Bold.ttf", "DejaVuSans-Oblique.ttf", "DejaVuSans-BoldOblique.ttf",
    "DejaVuSansMono.ttf", "DejaVuSansMono-Bold.ttf", "DejaVuSansMono-Oblique.ttf",
    "DejaVuSansMono-BoldOblique.ttf",
    "DejaVuSerif.ttf", "DejaVuSerif-Bold.ttf", "DejaVuSerif-Italic.ttf", "DejaVuSerif-BoldItalic.ttf",
    "STIXGeneral.ttf", "STIXGeneralBol.ttf", "STIXGeneralItalic.ttf", "STIXGeneralBolIta.ttf",
)
MIN_FACES: int = 8              # a class needs a valid rendering in at least this many faces
REF_SIZE: int = 28              # deduplication is measured at this size, whatever ``size`` is asked
SUPERSAMPLE: int = 2            # clean renderings and drawer variation run at SUPERSAMPLE * size
EM_FRACTION: float = 0.75       # the font's em square spans this fraction of the canvas
FIT_FRACTION: float = 0.86      # ink boxes larger than this fraction of the canvas are rendered smaller
BASELINE: float = 0.25          # the baseline lies this many em below the canvas centre
MIN_INK_FRACTION: float = 0.25  # ink boxes smaller than this fraction of the canvas do not count
DEDUP_THRESHOLD: float = 0.08   # minimum RMS distance between the class means (see module docstring)
SPLITS: tuple[str, ...] = ("random", "alphabet")
EXCLUDED_DECOMPOSITIONS: frozenset[str] = frozenset(
    {"<font>", "<super>", "<sub>", "<wide>", "<narrow>", "<small>", "<vertical>", "<noBreak>"})
_KEPT_CATEGORIES = ("L", "N", "S", "P")
_SCRIPTS = ("LATIN", "GREEK", "COPTIC", "CYRILLIC", "ARMENIAN", "GEORGIAN", "HEBREW", "ARABIC", "LAO",
            "NKO", "OGHAM", "TIFINAGH", "LISU", "OLD ITALIC")
# drawer variation (module docstring, step 4); lengths in grid_sample's [-1, 1] units
ROTATION_DEG: float = 12.0      # rotation uniform in +-this many degrees
ZOOM: float = 0.15              # zoom uniform in 1 +- this
ANISOTROPY: float = 0.08        # x/y aspect change uniform in 1 +- this
SHEAR: float = 0.15             # shear uniform in +- this
SHIFT: float = 0.08             # translation uniform in +- this (0.08 = 1.1 px at 28x28)
ELASTIC: float = 0.08           # elastic displacement amplitude (bicubic field of 5x5 uniform controls)

# Unicode blocks that hold any character of the 16 faces (from the Unicode Character Database, Blocks.txt).
_BLOCKS: tuple[tuple[int, int, str], ...] = (
    (0x0000, 0x007F, "Basic Latin"),
    (0x0080, 0x00FF, "Latin-1 Supplement"),
    (0x0100, 0x017F, "Latin Extended-A"),
    (0x0180, 0x024F, "Latin Extended-B"),
    (0x0250, 0x02AF, "IPA Extensions"),
    (0x02B0, 0x02FF, "Spacing Modifier Letters"),
    (0x0300, 0x036F, "Combining Diacritical Marks"),
    (0x0370, 0x03FF, "Greek and Coptic"),
    (0x0400, 0x04FF, "Cyrillic"),
    (0x0500, 0x052F, "Cyrillic Supplement"),
    (0x0530, 0x058F, "Armenian"),
    (0x0590, 0x05FF, "Hebrew"),
    (0x0600, 0x06FF, "Arabic"),
    (0x07C0, 0x07FF, "NKo"),
    (0x0E00, 0x0E7F, "Thai"),
    (0x0E80, 0x0EFF, "Lao"),
    (0x10A0, 0x10FF, "Georgian"),
    (0x1400, 0x167F, "Unified Canadian Aboriginal Syllabics"),
    (0x1680, 0x169F, "Ogham"),
    (0x1D00, 0x1D7F, "Phonetic Extensions"),
    (0x1D80, 0x1DBF, "Phonetic Extensions Supplement"),
    (0x1DC0, 0x1DFF, "Combining Diacritical Marks Supplement"),
    (0x1E00, 0x1EFF, "Latin Extended Additional"),
    (0x1F00, 0x1FFF, "Greek Extended"),
    (0x2000, 0x206F, "General Punctuation"),
    (0x2070, 0x209F, "Superscripts and Subscripts"),
    (0x20A0, 0x20CF, "Currency Symbols"),
    (0x20D0, 0x20FF, "Combining Diacritical Marks for Symbols"),
    (0x2100, 0x214F, "Letterlike Symbols"),
    (0x2150, 0x218F, "Number Forms"),
    (0x2190, 0x21FF, "Arrows"),
    (0x2200, 0x22FF, "Mathematical Operators"),
    (0x2300, 0x23FF, "Miscellaneous Technical"),
    (0x2400, 0x243F, "Control Pictures"),
    (0x2460, 0x24FF, "Enclosed Alphanumerics"),
    (0x2500, 0x257F, "Box Drawing"),
    (0x2580, 0x259F, "Block Elements"),
    (0x25A0, 0x25FF, "Geometric Shapes"),
    (0x2600, 0x26FF, "Miscellaneous Symbols"),
    (0x2700, 0x27BF, "Dingbats"),
    (0x27C0, 0x27EF, "Miscellaneous Mathematical Symbols-A"),
    (0x27F0, 0x27FF, "Supplemental Arrows-A"),
    (0x2800, 0x28FF, "Braille Patterns"),
    (0x2900, 0x297F, "Supplemental Arrows-B"),
    (0x2980, 0x29FF, "Miscellaneous Mathematical Symbols-B"),
    (0x2A00, 0x2AFF, "Supplemental Mathematical Operators"),
    (0x2B00, 0x2BFF, "Miscellaneous Symbols and Arrows"),
    (0x2C60, 0x2C7F, "Latin Extended-C"),
    (0x2D00, 0x2D2F, "Georgian Supplement"),
    (0x2D30, 0x2D7F, "Tifinagh"),
    (0x2E00, 0x2E7F, "Supplemental Punctuation"),
    (0x3000, 0x303F, "CJK Symbols and Punctuation"),
    (0x3040, 0x309F, "Hiragana"),
    (0x4DC0, 0x4DFF, "Yijing Hexagram Symbols"),
    (0xA4D0, 0xA4FF, "Lisu"),
    (0xA640, 0xA69F, "Cyrillic Extended-B"),
    (0xA700, 0xA71F, "Modifier Tone Letters"),
    (0xA720, 0xA7FF, "Latin Extended-D"),
    (0xE000, 0xF8FF, "Private Use Area"),
    (0xFB00, 0xFB4F, "Alphabetic Presentation Forms"),
    (0xFB50, 0xFDFF, "Arabic Presentation Forms-A"),
    (0xFE00, 0xFE0F, "Variation Selectors"),
    (0xFE20, 0xFE2F, "Combining Half Marks"),
    (0xFE70, 0xFEFF, "Arabic Presentation Forms-B"),
    (0xFFF0, 0xFFFF, "Specials"),
    (0x10300, 0x1032F, "Old Italic"),
    (0x1D300, 0x1D35F, "Tai Xuan Jing Symbols"),
    (0x1D400, 0x1D7FF, "Mathematical Alphanumeric Symbols"),
    (0x1EE00, 0x1EEFF, "Arabic Mathematical Alphabetic Symbols"),
    (0x1F030, 0x1F09F, "Domino Tiles"),
    (0x1F0A0, 0x1F0FF, "Playing Cards"),
    (0x1F300, 0x1F5FF, "Miscellaneous Symbols and Pictographs"),
    (0x1F600, 0x1F64F, "Emoticons"),
)


@dataclass(frozen=True)
class GlyphClass:
    """One class of the glyph set.

    Attributes:
        code: the Unicode code point.
        name: ``"U+0041 LATIN CAPITAL LETTER A"``.
        alphabet: the superclass: the script for letters (``"Latin"``, ``"Greek"``...), else the Unicode
            block (``"Arrows"``, ``"Box Drawing"``...).
        faces: indices into :data:`FACE_FILES` of the faces with a valid rendering.
        nn_distance: RMS distance of the class mean to the nearest *kept* class mean (the dedup measure).
    """

    code: int
    name: str
    alphabet: str
    faces: tuple[int, ...]
    nn_distance: float


def block_of(code: int) -> str:
    """The Unicode block name of ``code`` (``"Other"`` outside the blocks the faces use)."""
    for lo, hi, name in _BLOCKS:
        if lo <= code <= hi:
            return name
    return "Other"


def alphabet_of(code: int) -> str:
    """Superclass of a character: its script for letters (from the Unicode name), else its block."""
    ch = chr(code)
    if unicodedata.category(ch).startswith("L"):
        name = unicodedata.name(ch, "")
        for script in _SCRIPTS:
            if name.startswith(script + " "):
                return "NKo" if script == "NKO" else script.title()
    return block_of(code)


def font_paths() -> list[Path]:
    """Paths of the :data:`FACE_FILES` inside matplotlib's installed data; DataError when one is missing."""
    import matplotlib

    root = Path(matplotlib.get_data_path()) / "fonts" / "ttf"
    paths = [root / f for f in FACE_FILES]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise DataError(f"matplotlib's fonts are missing ({', '.join(missing)}); reinstall matplotlib "
                        f"(pip install --force-reinstall matplotlib)")
    return paths


def _library_versions() -> dict[str, str]:
    import matplotlib

    return {"matplotlib": matplotlib.__version__, "torch": torch.__version__.split("+")[0],
            "unicodedata": unicodedata.unidata_version}


class _Renderer:
    """Rasterises (character, face) pairs into uint8 canvases with ``FT2Font``.

    Placement is typographic, so position carries meaning (Braille dots 1-2-3 vs 4-5-6, box-drawing
    stubs, brackets): the advance box is centred horizontally and the baseline lies :data:`BASELINE` em
    below the centre. A glyph larger than the fit box is rendered smaller (about the centre); a glyph
    reaching past the fit box's margins is shifted back inside.

    Written with FT2Font directly (``load_char`` + ``draw_glyph_to_bitmap``, the per-glyph variant of
    ``set_text`` + ``draw_glyphs_to_bitmap``) because a matplotlib figure per glyph costs ~10 ms and this
    ~0.1 ms; about 40k renderings are needed.
    """

    def __init__(self, canvas: int) -> None:
        from matplotlib.ft2font import FT2Font, LoadFlags

        self.canvas = canvas
        self.em = EM_FRACTION * canvas
        self.fit = int(FIT_FRACTION * canvas)
        self.margin = (canvas - self.fit) // 2
        self.min_ink = MIN_INK_FRACTION * canvas
        self.flags = LoadFlags.NO_HINTING
        self.fonts = [FT2Font(str(p)) for p in font_paths()]
        self.charmaps = [set(f.get_charmap()) for f in self.fonts]
        self.sizes = [0.0] * len(self.fonts)
        self.scratch = np.zeros((3 * canvas, 3 * canvas), dtype=np.uint8)  # canvas at [c:2c, c:2c]

    def _load(self, face: int, code: int, px: float):
        if self.sizes[face] != px:
            self.fonts[face].set_size(px, 72)  # 72 dpi: one point is one pixel
            self.sizes[face] = px
        return self.fonts[face].load_char(code, flags=self.flags)

    def render(self, code: int, face: int, force: bool = False) -> np.ndarray | None:
        """``[canvas, canvas]`` uint8 ink coverage, or None (not in the face, blank, or tiny; with
        ``force`` only blank counts, so a class chosen at the reference size renders at every size)."""
        if code not in self.charmaps[face]:
            return None
        c, px = self.canvas, self.em
        glyph = self._load(face, code, px)
        x0, y0, x1, y1 = glyph.bbox  # 26.6 fixed point
        extent = max(x1 - x0, y1 - y0) / 64.0 + 2.0
        if extent > self.fit:
            px = px * self.fit / extent
            glyph = self._load(face, code, px)
            y1 = glyph.bbox[3]
        # pen position (integer pixels) and bitmap top: draw_glyph_to_bitmap adds the left bearing itself
        x = c + int(round(c / 2 - glyph.horiAdvance / 128.0))
        y = c + int(round(c / 2 + BASELINE * px)) - int(np.ceil(y1 / 64.0))
        self.scratch.fill(0)
        self.fonts[face].draw_glyph_to_bitmap(self.scratch, x, y, glyph, antialiased=True)
        rows = np.flatnonzero(self.scratch.max(axis=1))
        if rows.size == 0:
            return None
        cols = np.flatnonzero(self.scratch.max(axis=0))
        r0, r1, c0, c1 = rows[0], rows[-1] + 1, cols[0], cols[-1] + 1
        if (max(r1 - r0, c1 - c0) < self.min_ink and not force) or max(r1 - r0, c1 - c0) > self.fit:
            return None
        lo, hi = c + self.margin, 2 * c - self.margin  # the fit box in scratch coordinates
        dr = max(lo - r0, 0) + min(hi - r1, 0)
        dc = max(lo - c0, 0) + min(hi - c1, 0)
        out = np.zeros((c, c), dtype=np.uint8)
        out[r0 + dr - c:r1 + dr - c, c0 + dc - c:c1 + dc - c] = self.scratch[r0:r1, c0:c1]
        return out


def _is_candidate(code: int) -> bool:
    ch = chr(code)
    cat = unicodedata.category(ch)
    if not cat.startswith(_KEPT_CATEGORIES) or cat == "Co" or not unicodedata.name(ch, ""):
        return False
    decomposition = unicodedata.decomposition(ch)
    return not (decomposition.startswith("<") and decomposition.split(" ")[0] in EXCLUDED_DECOMPOSITIONS)


def _render_pairs(renderer: _Renderer, pairs: Sequence[tuple[int, int]],
                  force: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Clean renderings of ``(code, face)`` pairs: ``[P, canvas, canvas]`` uint8 and ``[P]`` bool valid."""
    out = np.zeros((len(pairs), renderer.canvas, renderer.canvas), dtype=np.uint8)
    valid = np.zeros(len(pairs), dtype=bool)
    for i, (code, face) in enumerate(pairs):
        img = renderer.render(code, face, force)
        if img is not None:
            out[i], valid[i] = img, True
    return out, valid


def _class_means(imgs: np.ndarray, owner: np.ndarray, num_classes: int) -> torch.Tensor:
    """``[K, (canvas/2)**2]`` float64 class means in [0, 1] of supersampled clean renderings.

    Args:
        imgs: ``[P, canvas, canvas]`` uint8 renderings; owner: ``[P]`` int class index of each.
    Pixel sums are accumulated in int64, so the means are exact and independent of summation order (one
    batched reduction instead of one small torch call per class, which is slow on a busy machine).
    """
    p, c, _ = imgs.shape
    s = c // SUPERSAMPLE
    owner_t = torch.from_numpy(owner.astype(np.int64))
    sums = torch.zeros(num_classes, s * s, dtype=torch.int64)
    for lo in range(0, p, 4096):
        x = torch.from_numpy(imgs[lo:lo + 4096]).to(torch.int64)
        x = x.view(-1, s, SUPERSAMPLE, s, SUPERSAMPLE).sum((2, 4)).flatten(1)
        sums.index_add_(0, owner_t[lo:lo + 4096], x)
    counts = torch.bincount(owner_t, minlength=num_classes).to(torch.float64)
    return sums.to(torch.float64) / (counts[:, None] * (255.0 * SUPERSAMPLE**2))


def _priority(codes: Sequence[int]) -> list[int]:
    """Visiting order of the greedy dedup: characters with fewer code points in their canonical
    decomposition (NFD) first, so base letters beat their accented forms (Omega before Omega with tonos),
    then code-point order (Latin A before Greek Alpha before Cyrillic A)."""
    return sorted(range(len(codes)), key=lambda i: (len(unicodedata.normalize("NFD", chr(codes[i]))), codes[i]))


@functools.lru_cache(maxsize=2)
def _dedup(min_faces: int = MIN_FACES,
           threshold: float = DEDUP_THRESHOLD) -> tuple[list[GlyphClass], dict, torch.Tensor]:
    """Candidate scan, reference rendering and greedy deduplication (module docstring, steps 2 and 3).

    Returns the kept classes, the counts, and ``[K, 784]`` float64 class means of the kept classes.
    """
    t0 = time.perf_counter()
    renderer = _Renderer(SUPERSAMPLE * REF_SIZE)
    codes = sorted(c for c in set().union(*renderer.charmaps)
                   if _is_candidate(c) and sum(c in cm for cm in renderer.charmaps) >= min_faces)
    pairs = [(c, f) for c in codes for f in range(len(FACE_FILES)) if c in renderer.charmaps[f]]
    imgs, valid = _render_pairs(renderer, pairs)
    owner = np.searchsorted(np.array(codes), np.array([c for c, _ in pairs]))
    n_valid = np.bincount(owner[valid], minlength=len(codes))
    ok = n_valid >= min_faces  # else blank or tiny in too many faces
    cand = np.flatnonzero(ok)
    remap = np.full(len(codes), -1)
    remap[cand] = np.arange(len(cand))
    use = valid & ok[owner]
    m = _class_means(imgs[use], remap[owner[use]], len(cand))              # [K0, 784]
    faces: list[list[int]] = [[] for _ in cand]
    for (code, face), u, o in zip(pairs, use, owner):
        if u:
            faces[remap[o]].append(face)
    dist = torch.cdist(m, m).div_(REF_SIZE)                                # RMS distance, [K0, K0]
    dist.fill_diagonal_(float("inf"))
    close = (dist < threshold).numpy()
    keep = np.zeros(len(cand), dtype=bool)
    for i in _priority([codes[j] for j in cand]):  # greedy: the higher-priority character survives
        keep[i] = not close[i][keep].any()
    keep_t = torch.from_numpy(keep)
    nn = dist[keep_t][:, keep_t].min(1).values
    classes = []
    for j, i in enumerate(np.flatnonzero(keep)):
        code = codes[cand[i]]
        classes.append(GlyphClass(code, f"U+{code:04X} {unicodedata.name(chr(code))}", alphabet_of(code),
                                  tuple(faces[i]), float(nn[j])))
    report = {
        "candidates_in_min_faces": len(codes),
        "dropped_blank_or_tiny": int((~ok).sum()),
        "before_dedup": len(cand),
        "dropped_duplicates": int((~keep).sum()),
        "classes": len(classes),
        "min_nn_distance": float(nn.min()),
        "median_nn_distance": float(nn.median()),
        "seconds": time.perf_counter() - t0,
    }
    return classes, report, m[keep_t]


def glyph_classes() -> list[GlyphClass]:
    """The deduplicated class list, in code-point order (computed once per process, a few seconds).

    Inspect it with e.g. ``[(c.name, c.alphabet, len(c.faces)) for c in glyph_classes()]``.
    """
    return list(_dedup()[0])


def dedup_report() -> dict[str, object]:
    """The counts behind :func:`glyph_classes` (candidates, dropped blanks, dropped duplicates, NN distances)."""
    return dict(_dedup()[1])


def class_means() -> torch.Tensor:
    """``[K, 28*28]`` float64 clean class means of :func:`glyph_classes` in [0, 1], as deduplication saw them."""
    return _dedup()[2].clone()


def clean_class_means(classes: Sequence[GlyphClass], size: int = REF_SIZE) -> torch.Tensor:
    """``[K, size*size]`` float64 class means of the clean renderings in [0, 1] (the dedup measure at 28)."""
    renderer = _Renderer(SUPERSAMPLE * size)
    pairs = [(c.code, f) for c in classes for f in c.faces]
    imgs, valid = _render_pairs(renderer, pairs)
    if not valid.all():
        raise DataError("a glyph of the class list no longer renders; bump GENERATOR_VERSION")
    owner = np.repeat(np.arange(len(classes)), [len(c.faces) for c in classes])
    return _class_means(imgs, owner, len(classes))


def _drawer_params(classes: Sequence[GlyphClass], seed: int, instances: int) -> tuple[torch.Tensor, ...]:
    """Per-instance random parameters, each class from its own generator seeded by ``(seed, code)``.

    Uniform draws only (``torch.rand`` on a CPU generator is bit-identical across CPUs; ``randn`` has
    vectorised code paths that may differ). Returns ``face [K*I]`` int64 (instance ``i`` uses face
    ``perm[i % F]``), ``u [K*I, 13]`` float64 in [0, 1) for the affine/stroke/colour draws and
    ``noise [K*I, 2, 5, 5]`` float64 in [-1, 1) for the elastic field.
    """
    n_u, n_noise = 13, 2 * 5 * 5
    face = np.empty((len(classes), instances), dtype=np.int64)
    u = np.empty((len(classes), instances, n_u + n_noise), dtype=np.float64)
    g = torch.Generator()
    for k, c in enumerate(classes):
        g.manual_seed((int(seed) * 1_000_003 + c.code) % (2**63 - 1))
        r = torch.rand(len(c.faces) + instances * (n_u + n_noise), generator=g, dtype=torch.float64).numpy()
        perm = np.argsort(r[:len(c.faces)], kind="stable")
        face[k] = np.asarray(c.faces)[perm[np.arange(instances) % len(c.faces)]]
        u[k] = r[len(c.faces):].reshape(instances, n_u + n_noise)
    u_t = torch.from_numpy(u.reshape(-1, n_u + n_noise))
    return torch.from_numpy(face.reshape(-1)), u_t[:, :n_u], u_t[:, n_u:].reshape(-1, 2, 5, 5) * 2 - 1


def _shift_extreme(x: torch.Tensor, op) -> torch.Tensor:
    """3x3 max (``op=torch.maximum``: dilation) or min (``torch.minimum``: erosion) filter of ``[N, 1, S, S]``
    uint8 as separable shifted extrema; 7x faster than ``max_pool2d`` on CPU and exact (integers)."""
    p = F.pad(x, (1, 1, 1, 1))
    h = op(op(p[..., :, :-2], p[..., :, 1:-1]), p[..., :, 2:])
    return op(op(h[..., :-2, :], h[..., 1:-1, :]), h[..., 2:, :])


@functools.lru_cache(maxsize=8)
def _cubic_matrix(s: int, g: int) -> torch.Tensor:
    """``[s, g]`` float64 weights of 1-D bicubic interpolation (align_corners) from ``g`` control values to
    ``s`` samples, taken from ``F.interpolate`` itself; the 2-D field is ``B @ X @ B.T`` (bicubic is
    separable), one batched matmul instead of ``upsample_bicubic2d`` (3x faster here)."""
    eye = torch.eye(g, dtype=torch.float64).view(g, 1, g, 1)
    return F.interpolate(eye, size=(s, 1), mode="bicubic", align_corners=True)[:, 0, :, 0].T.contiguous()


def _stroke_bank(clean: torch.Tensor) -> torch.Tensor:
    """``[P, 1, S, S]`` uint8 clean renderings -> ``[P, 3, S-1, S-1]`` int16: 2x2 box sums (stride 1) of the
    rendering, its 3x3 dilation and its 3x3 erosion. Integer, so exact; computed once per (char, face)."""
    x = torch.cat((clean, _shift_extreme(clean, torch.maximum), _shift_extreme(clean, torch.minimum)), 1)
    x = x.to(torch.int16)
    return x[..., :-1, :-1] + x[..., 1:, :-1] + x[..., :-1, 1:] + x[..., 1:, 1:]


def _warp(bank: torch.Tensor, src: torch.Tensor, u: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """Drawer variation of ``N`` instances of the pairs ``src`` (indices into ``bank``).

    Args:
        bank: ``[P, 3, S-1, S-1]`` int16 from :func:`_stroke_bank`.
        src: ``[N]`` int64 pair index of each instance.
        u: ``[N, >=7]`` float64 uniform [0, 1): rotation, zoom, anisotropy, shear, shift x, shift y, stroke.
        noise: ``[N, 2, g, g]`` float64 uniform [-1, 1): elastic-field control values.
    Returns:
        ``[N, 1, S/2, S/2]`` float64 ink coverage in [0, 255].

    One ``grid_sample`` at the output resolution from the 2x2-box-prefiltered supersampled source: for
    these mild warps the same as warping at 2x and box-downsampling, at a quarter of the cost. Stroke width
    is a blend of the rendering with its dilation (``a > 0``) or, more gently, its erosion (``a < 0``);
    the blend is linear, so it is applied after sampling both sources.
    """
    n = len(src)
    big = bank.shape[-1] + 1                                              # supersampled canvas S
    s = big // SUPERSAMPLE
    a = u[:, 6] * 2 - 1
    pick = torch.stack((src * 3, src * 3 + torch.where(a > 0, 1, 2)), 1).flatten()
    x = bank.flatten(0, 1)[pick].view(n, 2, big - 1, big - 1).to(torch.float64)
    # affine jitter: sampling coordinates = A @ output coordinates + t, in [-1, 1] (grid_sample's units)
    rot = (u[:, 0] * 2 - 1) * (ROTATION_DEG * torch.pi / 180.0)
    zoom = 1.0 + (u[:, 1] * 2 - 1) * ZOOM
    aniso = 1.0 + (u[:, 2] * 2 - 1) * ANISOTROPY
    shear = (u[:, 3] * 2 - 1) * SHEAR
    cos, sin = torch.cos(rot), torch.sin(rot)
    sx, sy = 1.0 / (zoom * aniso), aniso / zoom
    a00, a01 = cos * sx, (cos * shear - sin) * sy
    a10, a11 = sin * sx, (sin * shear + cos) * sy
    tx, ty = (u[:, 4] * 2 - 1) * SHIFT, (u[:, 5] * 2 - 1) * SHIFT
    # elastic distortion: smooth displacement field (bicubic upsampling of the control values)
    b = _cubic_matrix(s, noise.shape[-1])
    field = (b @ noise @ b.T) * ELASTIC                                     # [N, 2, s, s]
    pos = (torch.arange(s, dtype=torch.float64) * 2 + 1) / s - 1           # output pixel centres
    grid = torch.empty(n, s, s, 2, dtype=torch.float64)
    grid[..., 0] = field[:, 0] + (a00[:, None] * pos)[:, None, :] + (a01[:, None] * pos + tx[:, None])[:, :, None]
    grid[..., 1] = field[:, 1] + (a10[:, None] * pos)[:, None, :] + (a11[:, None] * pos + ty[:, None])[:, :, None]
    # the box-filtered source has its pixel centres on the canvas's pixel corners 1..S-1: rescale
    grid.mul_(big / (big - 2))
    y = F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=True)  # [N, 2, s, s]
    w = torch.where(a > 0, a, -0.6 * a).view(n, 1, 1, 1)
    return torch.lerp(y[:, :1], y[:, 1:], w).mul_(0.25)


def drawer_variation(clean: torch.Tensor, u: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """Random drawer variation of clean glyphs (module docstring, step 4); all float work in float64.

    Args:
        clean: ``[N, 1, S, S]`` uint8 supersampled clean renderings (S = 2 * output size).
        u: ``[N, >=7]`` float64 uniform [0, 1) draws; noise: ``[N, 2, g, g]`` float64 uniform [-1, 1).
    Returns:
        ``[N, 1, S/2, S/2]`` float64 ink coverage in [0, 255].
    """
    return _warp(_stroke_bank(clean), torch.arange(len(clean)), u, noise)


def _colourise(alpha: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """``[N, 1, s, s]`` ink coverage in [0, 1] -> ``[N, 3, s, s]`` in [0, 1]: background ``u[:, 7:10]``,
    foreground per channel ``(bg + 0.3 + 0.4 * u[:, 10:13]) mod 1``, so each channel differs by 0.3..0.7."""
    bg = u[:, 7:10]
    fg = torch.remainder(bg + 0.3 + 0.4 * u[:, 10:13], 1.0)
    return bg[:, :, None, None] + (fg - bg)[:, :, None, None] * alpha


def _generate(classes: Sequence[GlyphClass], size: int, rgb: bool, seed: int, instances: int) -> torch.Tensor:
    """``[K * instances, C, size, size]`` uint8, class-major (instances of class k at ``k*I:(k+1)*I``).

    Works through chunks of classes (about 1024 images each), so memory stays bounded at any ``size``.
    """
    renderer = _Renderer(SUPERSAMPLE * size)
    face, u, noise = _drawer_params(classes, seed, instances)
    out = torch.empty(len(classes) * instances, 3 if rgb else 1, size, size, dtype=torch.uint8)
    step = max(1, 1024 // instances)
    for k0 in range(0, len(classes), step):
        chunk = classes[k0:k0 + step]
        pairs = [(c.code, f) for c in chunk for f in c.faces]
        imgs, valid = _render_pairs(renderer, pairs, force=True)
        if not valid.all():
            bad = pairs[int(np.flatnonzero(~valid)[0])]
            raise DataError(f"U+{bad[0]:04X} no longer renders in {FACE_FILES[bad[1]]} at size {size}; "
                            f"bump GENERATOR_VERSION and regenerate")
        bank = _stroke_bank(torch.from_numpy(imgs).unsqueeze(1))
        index = {p: i for i, p in enumerate(pairs)}
        lo, hi = k0 * instances, (k0 + len(chunk)) * instances
        codes = np.repeat([c.code for c in chunk], instances)
        src = torch.tensor([index[(c, f)] for c, f in zip(codes.tolist(), face[lo:hi].tolist())])
        y = _warp(bank, src, u[lo:hi], noise[lo:hi])
        if rgb:
            y = _colourise(y.div_(255.0), u[lo:hi]).mul_(255.0)
        out[lo:hi] = y.round_().clamp_(0, 255).to(torch.uint8)
    return out


def _select_classes(classes: list[GlyphClass], max_classes: int | None, seed: int) -> list[GlyphClass]:
    if max_classes is None or max_classes >= len(classes):
        return classes
    if max_classes < 3:
        raise ValueError(f"max_classes={max_classes} leaves a split empty; use at least 3 (or None for all)")
    keep = torch.randperm(len(classes), generator=torch.Generator().manual_seed(seed))[:max_classes]
    return [classes[i] for i in sorted(keep.tolist())]


def _split_counts(n: int, fractions: Sequence[float]) -> list[int]:
    counts = [int(round(f * n)) for f in fractions[:2]]
    counts.append(n - sum(counts))
    if min(counts) < 1:
        raise DataError(f"{n} classes cannot fill train/val/test with fractions {tuple(fractions)}; "
                        f"raise max_classes or the smallest fraction")
    return counts


def _assign_random(n: int, fractions: Sequence[float], seed: int) -> torch.Tensor:
    """``[n]`` split id (0 train, 1 val, 2 test) of each class: a seeded shuffle cut at the fractions."""
    counts = _split_counts(n, fractions)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed + 1))
    split = torch.empty(n, dtype=torch.long)
    split[perm] = torch.repeat_interleave(torch.arange(3), torch.tensor(counts))
    return split


def _assign_alphabets(alphabet_ids: torch.Tensor, fractions: Sequence[float], seed: int,
                      tries: int = 256) -> torch.Tensor:
    """``[n]`` split id per class with whole alphabets per split (superclass-disjoint).

    Greedy: alphabets in a seeded random order each go to the split furthest below its target class count;
    of ``tries`` orders the one closest to the targets (L1) is kept. Every split gets at least one alphabet.
    """
    n_alpha = int(alphabet_ids.max()) + 1
    if n_alpha < 3:
        raise DataError(f"only {n_alpha} alphabets: the alphabet split needs 3; use split='random' or raise "
                        f"max_classes")
    sizes = torch.bincount(alphabet_ids, minlength=n_alpha).tolist()
    target = [f * len(alphabet_ids) for f in fractions]
    g = torch.Generator().manual_seed(seed + 2)
    best, best_err = None, float("inf")
    for _ in range(tries):
        order = torch.randperm(n_alpha, generator=g).tolist()
        got, assign = [0.0, 0.0, 0.0], [0] * n_alpha
        for j, a in enumerate(order):
            empty = [s for s in range(3) if got[s] == 0]
            if len(empty) == n_alpha - j:  # the remaining alphabets must fill the empty splits
                s = empty[0]
            else:
                s = max(range(3), key=lambda k: target[k] - got[k])
            assign[a] = s
            got[s] += sizes[a]
        err = sum(abs(t - c) for t, c in zip(target, got))
        if min(got) > 0 and err < best_err:
            best, best_err = assign, err
    assert best is not None
    return torch.tensor(best)[alphabet_ids]


def _cache_key(size: int, rgb: bool, seed: int, instances: int, max_classes: int | None) -> dict:
    return {"generator_version": GENERATOR_VERSION, **_library_versions(), "size": size, "rgb": rgb,
            "seed": seed, "instances": instances, "max_classes": max_classes, "min_faces": MIN_FACES,
            "dedup_threshold": DEDUP_THRESHOLD}


def _load_or_generate(size: int, rgb: bool, seed: int, instances: int, max_classes: int | None,
                      cache_dir: Path) -> tuple[dict[str, np.ndarray], bool, Path]:
    key = _cache_key(size, rgb, seed, instances, max_classes)
    path = cache_dir / f"glyphs-{size}px-{'rgb' if rgb else 'gray'}-seed{seed}-{config_hash(key)}.npz"
    if path.is_file():
        try:
            with np.load(path, allow_pickle=False) as z:
                data = {k: z[k] for k in z.files}
            if str(data["key"]) == config_hash(key):
                return data, True, path
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:  # truncated, damaged, foreign
            warnings.warn(f"regenerating the damaged glyph cache {path} ({type(e).__name__}: {e})", stacklevel=3)
    t0 = time.perf_counter()
    classes = _select_classes(glyph_classes(), max_classes, seed)
    images = _generate(classes, size, rgb, seed, instances)
    data = {
        "images": images.numpy(),
        "codes": np.array([c.code for c in classes], dtype=np.int64),
        "names": np.array([c.name for c in classes]),
        "alphabets": np.array([c.alphabet for c in classes]),
        "num_faces": np.array([len(c.faces) for c in classes], dtype=np.int64),
        "nn_distance": np.array([c.nn_distance for c in classes], dtype=np.float64),
        "key": np.array(config_hash(key)),
        "seconds": np.array(time.perf_counter() - t0),
    }
    buf = io.BytesIO()
    np.savez(buf, **data)
    atomic_write_bytes(path, buf.getvalue())
    return data, False, path


def load_glyphs(size: int = 28, rgb: bool = False, split: str = "random", seed: int = 0,
                instances: int = 20, max_classes: int | None = None,
                fractions: Sequence[float] = (0.64, 0.16, 0.20),
                cache_dir: str | Path | None = None) -> FewShotDataset:
    """The glyph set as class-disjoint ``train``/``val``/``test`` splits.

    Args:
        size: output side in pixels (images ``[N, C, size, size]`` uint8).
        rgb: three channels with random foreground/background colours per instance (else one channel).
        split: ``"random"`` (classes shuffled) or ``"alphabet"`` (whole alphabets per split, superclass-
            disjoint like tieredImageNet/FC100).
        seed: drawer variation, the ``max_classes`` subset and the split assignment.
        instances: images per class (faces x drawer variations; every class has exactly this many).
        max_classes: keep a deterministic (seeded) subset of this many classes before splitting; only
            those are generated (smoke runs).
        fractions: train/val/test fractions of the classes (of class counts; for ``"alphabet"`` a target).
        cache_dir: folder for the generated ``.npz`` (default ``default_cache_dir() / "glyphs"``).
    Returns:
        FewShotDataset ``"glyphs"`` whose splits carry local labels ``0..K-1``, ``class_names`` like
        ``"U+0041 LATIN CAPITAL LETTER A"``, ``superclass``/``superclass_names`` (the alphabets, global
        names); ``info`` records the split rule, counts, dedup rule and threshold, faces, cache file.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown glyph split {split!r}; allowed: {', '.join(SPLITS)}")
    if size < 8:
        raise ValueError(f"size={size} is too small to draw a glyph; use size >= 8 (default 28)")
    if instances < 1:
        raise ValueError(f"instances={instances}; use at least 1 (default 20)")
    if len(fractions) != 3 or min(fractions) <= 0 or abs(sum(fractions) - 1) > 1e-6:
        raise ValueError(f"fractions={tuple(fractions)} must be three positive numbers summing to 1")
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir() / "glyphs"
    data, hit, path = _load_or_generate(size, rgb, seed, instances, max_classes, cache)

    names = [str(s) for s in data["names"]]
    alph = [str(s) for s in data["alphabets"]]
    alphabet_names = sorted(set(alph))
    alphabet_ids = torch.tensor([alphabet_names.index(a) for a in alph])
    if split == "random":
        assign = _assign_random(len(names), fractions, seed)
    else:
        assign = _assign_alphabets(alphabet_ids, fractions, seed)
    images = torch.from_numpy(data["images"])
    k_all = len(names)
    labels_all = torch.arange(k_all).repeat_interleave(instances)
    splits: dict[str, ImageSplit] = {}
    for s, split_name in enumerate(("train", "val", "test")):
        cls = torch.nonzero(assign == s).flatten()
        local = torch.full((k_all,), -1, dtype=torch.long)
        local[cls] = torch.arange(len(cls))
        keep = local[labels_all] >= 0
        splits[split_name] = ImageSplit(
            images=images[keep].clone(), labels=local[labels_all[keep]],
            class_names=[names[i] for i in cls.tolist()], superclass=alphabet_ids[cls].clone(),
            superclass_names=alphabet_names, name=f"glyphs/{split_name}")
    info: dict[str, object] = {
        "split": split,
        "split_rule": ("classes shuffled with the seed and cut at the fractions" if split == "random" else
                       "whole alphabets (scripts for letters, Unicode blocks otherwise) per split, greedy "
                       "towards the fractions"),
        "fractions": tuple(fractions),
        "classes": {k: v.num_classes for k, v in splits.items()},
        "alphabets": {k: int(torch.unique(v.superclass).numel()) for k, v in splits.items()},
        "instances": instances, "size": size, "rgb": rgb, "seed": seed, "max_classes": max_classes,
        "dedup_rule": "greedy, base characters (short NFD) first, then code point: drop a class whose clean "
                      "class mean (28x28, mean over its faces) lies within the RMS threshold of a kept class",
        "dedup_threshold": DEDUP_THRESHOLD,
        "min_nn_distance": float(data["nn_distance"].min()),
        "num_faces": len(FACE_FILES), "faces": list(FACE_FILES), "min_faces": MIN_FACES,
        "generator_version": GENERATOR_VERSION, **_library_versions(),
        "cache_file": str(path), "cache_hit": hit, "generation_seconds": float(data["seconds"]),
    }
    return FewShotDataset(name="glyphs", splits=splits, info=info)


if __name__ == "__main__":
    t = time.perf_counter()
    ds = load_glyphs()  # prints the time of a full generation on a cache miss
    print(f"load_glyphs: {time.perf_counter() - t:.1f} s", ds.info)
    print(dedup_report())
