"""The MinHash machinery of stages/_minhash.py: shingles, signatures, bands, union-find."""

from __future__ import annotations

import unicodedata

import minhash_reference as ref
import numpy as np
import pytest
from dedup_support import real_docs
from hypothesis import given, settings
from hypothesis import strategies as st

from stages import _minhash as mh
from stages import _minhash_lsh as lsh

ALPHABET = "秦川雄帝宅函谷壯皇居綺殿千尋起的是了abcXYZ019０１ＡＢ，。！？ \n\t-_'é\u0301\u200b"
texts = st.text(alphabet=ALPHABET, max_size=60)


def string_jaccard(a: list[str], b: list[str]) -> float:
    x, y = set(a), set(b)
    return len(x & y) / len(x | y) if x | y else 1.0


@settings(max_examples=150, deadline=None)
@given(st.lists(texts, min_size=1, max_size=6))
def test_vectorised_shingles_match_the_reference(batch: list[str]) -> None:
    shingles = mh.shingle_batch(batch)
    reference = [mh.shingle_strings(t) for t in batch]
    assert shingles.sizes().tolist() == [len(r) for r in reference]
    for i in range(len(batch)):
        for j in range(len(batch)):
            assert ref.jaccard_exact(shingles.shingles(i), shingles.shingles(j)) == pytest.approx(
                string_jaccard(reference[i], reference[j])
            )


@settings(max_examples=60, deadline=None)
@given(st.lists(texts, min_size=2, max_size=5), st.integers(0, 3))
def test_a_document_hashes_the_same_whatever_its_batch(batch: list[str], seed: int) -> None:
    hasher = lsh.MinHasher(32, seed)
    together = hasher.signatures(mh.shingle_batch(batch))
    alone = np.vstack([hasher.signatures(mh.shingle_batch([t])) for t in batch])
    assert np.array_equal(together, alone)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(0, 40), min_size=1, max_size=30),
    st.integers(1, 64),
    st.integers(1, 9),
    st.integers(0, 2**32 - 1),
)
def test_numpy_signatures_equal_the_compiled_loop(
    sizes: list[int], num_perm: int, chunk: int, seed: int
) -> None:
    """The numpy signatures (used until a process has done NUMBA_AFTER products) equal the
    compiled loop's bit for bit, documents without shingles and documents cut by chunks included."""
    rng = np.random.default_rng(seed)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    hashes = rng.integers(1, 2**32, size=int(offsets[-1]), dtype=np.uint64).astype(np.uint32)
    a = lsh.MinHasher(num_perm, seed % 7).a
    compiled = np.empty((len(sizes), num_perm), dtype=np.uint32)
    lsh._signature_kernel()(hashes, offsets, a, compiled)
    with_numpy = np.full((len(sizes), num_perm), 0xFFFFFFFF, dtype=np.uint32)
    previous, lsh.SIGNATURE_CHUNK = lsh.SIGNATURE_CHUNK, chunk
    try:
        lsh._signatures_numpy(hashes, offsets, a, with_numpy)
    finally:
        lsh.SIGNATURE_CHUNK = previous
    assert np.array_equal(with_numpy, compiled)


def test_signatures_switch_to_the_compiled_loop_after_numba_after_products(monkeypatch) -> None:
    batch = mh.shingle_batch(
        ["床前明月光疑是地上霜举头望明月低头思故乡", "", "the quick brown fox jumps over"]
    )
    hasher = lsh.MinHasher(16, 0)
    monkeypatch.setattr(lsh, "_numpy_products", 0)
    monkeypatch.setattr(lsh, "NUMBA_AFTER", batch.hashes.size * 16)
    lsh._signature_kernel.cache_clear()
    first = hasher.signatures(batch)  # numpy: within the allowance
    assert lsh._numpy_products == batch.hashes.size * 16
    assert lsh._signature_kernel.cache_info().currsize == 0
    second = hasher.signatures(batch)  # beyond it: the compiled loop, loaded now
    assert lsh._signature_kernel.cache_info().currsize == 1
    assert np.array_equal(first, second)
    assert (first[1] == 0xFFFFFFFF).all()


def test_simplification_folds_script_width_case_and_digits() -> None:
    same = [
        (
            "秦川雄帝宅，函谷壯皇居。綺殿千尋起",
            "秦川雄帝宅,函谷壮皇居.绮殿千寻起",
        ),  # Traditional / Simplified
        ("ＡＢＣ　Ｄｅｆ　ｇｈｉ １２３", "abc def ghi 456"),  # full width, case, digits
        ("Hello,   World!!", "hello world"),  # punctuation and spaces
    ]
    for a, b in same:
        assert mh.shingle_strings(a) == mh.shingle_strings(b)
    assert mh.shingle_strings("秦川雄帝宅壯皇", fold_variants=False) != mh.shingle_strings("秦川雄帝宅壮皇")


def reference_char_tables(fold_variants: bool) -> tuple[np.ndarray, np.ndarray]:
    """char_tables' contract, one code point at a time."""
    fold = np.arange(mh.TABLE_SIZE, dtype=np.uint32)
    cls = np.zeros(mh.TABLE_SIZE, dtype=np.uint8)

    def is_cjk(cp: int) -> bool:
        return any(lo <= cp <= hi for lo, hi in mh._CJK_RANGES)

    han: list[int] = []
    for cp in range(1, 0x40000):
        ch = chr(cp)
        if unicodedata.category(ch) in ("Cn", "Co", "Cs"):
            continue
        folded = unicodedata.normalize("NFKC", ch)
        folded = folded if len(folded) == 1 else ch
        folded = folded.lower() if len(folded.lower()) == 1 else folded
        category = unicodedata.category(folded)
        if category == "Nd":
            folded = "0"
        fold[cp] = ord(folded)
        if category[0] in "LN" and is_cjk(ord(folded)):
            cls[cp] = mh.CJK
            if 0x3400 <= ord(folded) <= 0x9FFF or ord(folded) >= 0x20000:
                han.append(cp)
        elif category[0] in "LN":
            cls[cp] = mh.WORD
        elif category[0] == "M" or category == "Cf":
            cls[cp] = mh.IGNORED
        elif category[0] in "PS":
            cls[cp] = mh.MARK
            fold[cp] = mh.MARK_TOKEN
    if fold_variants:
        import opencc

        converted = opencc.OpenCC("t2s").convert("\n".join(chr(fold[cp]) for cp in han)).split("\n")
        assert len(converted) == len(han)
        variants = dict(
            line.split("\t") for line in mh.VARIANTS_FILE.read_text(encoding="utf-8").splitlines()[1:]
        )
        for cp, out in zip(han, converted, strict=True):
            if len(out) == 1 and is_cjk(ord(out)):
                fold[cp] = ord(out)
            fold[cp] = ord(variants.get(chr(fold[cp]), chr(fold[cp])))
    return fold, cls


@pytest.mark.parametrize("fold_variants", [True, False])
def test_char_tables_match_the_per_character_reference(fold_variants: bool) -> None:
    fold, cls = mh.char_tables(fold_variants)
    reference_fold, reference_cls = reference_char_tables(fold_variants)
    assert fold.dtype == np.uint32 and cls.dtype == np.uint8
    assert np.array_equal(fold, reference_fold)
    assert np.array_equal(cls, reference_cls)


def test_chinese_is_shingled_in_characters_and_latin_in_words() -> None:
    batch = mh.shingle_batch(["床前明月光疑是地上霜", "the quick brown fox jumps over the lazy dog"])
    assert batch.cjk.tolist() == [True, False]
    assert mh.shingle_strings("床前明月光疑是地上霜")[0] == "光 疑 是 地 上"
    assert "quick brown fox jumps over" in mh.shingle_strings("the quick brown fox jumps over the lazy dog")
    assert mh.shingle_strings("。。！") == []
    assert mh.shingle_strings("短句") == ["短 句"]


@pytest.mark.parametrize("threshold", [0.5, 0.7, 0.8, 0.9])
@pytest.mark.parametrize("weights", [(0.5, 0.5), (0.1, 0.9)])
def test_bands_and_rows_match_datasketch(threshold: float, weights: tuple[float, float]) -> None:
    from datasketch.lsh import _optimal_param

    assert lsh.optimal_bands(threshold, 128, *weights) == _optimal_param(threshold, 128, *weights)


def _optimal_bands_pair_by_pair(
    threshold: float, num_perm: int, fp_weight: float, fn_weight: float
) -> tuple[int, int]:
    """optimal_bands as it was first written: every (bands, rows) integrated on its own."""
    best, best_err = (1, num_perm), float("inf")
    for b in range(1, num_perm + 1):
        for r in range(1, num_perm // b + 1):
            err = fp_weight * lsh.false_positive_area(threshold, b, r) + fn_weight * lsh.false_negative_area(
                threshold, b, r
            )
            if err < best_err - 1e-12:
                best, best_err = (b, r), err
    return best


@pytest.mark.parametrize("threshold", [0.3, 0.5, 0.7, 0.8, 0.85, 0.9, 1.0])
@pytest.mark.parametrize("num_perm", [16, 100, 128])
@pytest.mark.parametrize("weights", [(0.5, 0.5), (0.05, 0.95), (0.9, 0.1), (1.0, 0.0)])
def test_bands_and_rows_as_integrated_pair_by_pair(
    threshold: float, num_perm: int, weights: tuple[float, float]
) -> None:
    assert lsh.optimal_bands(threshold, num_perm, *weights) == _optimal_bands_pair_by_pair(
        threshold, num_perm, *weights
    )


def test_candidate_probability_is_the_s_curve() -> None:
    b, r = lsh.optimal_bands(0.8, 128, 0.1, 0.9)
    assert ref.candidate_probability(0.95, b, r) > 0.99
    assert ref.candidate_probability(0.3, b, r) < 0.01


def _edited(text: str, rng: np.random.Generator, rate: float) -> str:
    chars = list(text)
    for i in rng.choice(len(chars), size=max(1, int(rate * len(chars))), replace=False):
        chars[i] = "某" if ord(chars[i]) > 0x2E80 else "q"
    return "".join(chars)


def test_jaccard_estimates_agree_with_datasketch_on_real_documents() -> None:
    """Same expected value (the true Jaccard) and comparable variance as datasketch's MinHash."""
    from datasketch import MinHash

    docs = [d["text"] for d in real_docs()]
    rng = np.random.default_rng(7)
    pairs = [(docs[i], docs[i + 1]) for i in range(0, 8, 2)]  # the same poems in two editions
    pairs += [
        (d, _edited(d, rng, rate)) for d, rate in zip(docs[8:], [0.01, 0.02, 0.03, 0.05] * 2, strict=True)
    ]
    seeds = range(40)
    num_perm = 128
    for a, b in pairs:
        sa, sb = mh.shingle_strings(a), mh.shingle_strings(b)
        truth = string_jaccard(sa, sb)
        ours = []
        for seed in seeds:
            sig = lsh.MinHasher(num_perm, seed).signatures(mh.shingle_batch([a, b]))
            ours.append(float(np.mean(sig[0] == sig[1])))
        theirs = []
        for seed in seeds:
            ma, mb = MinHash(num_perm=num_perm, seed=seed), MinHash(num_perm=num_perm, seed=seed)
            ma.update_batch([s.encode() for s in sa])
            mb.update_batch([s.encode() for s in sb])
            theirs.append(ma.jaccard(mb))
        binomial_sd = np.sqrt(truth * (1 - truth) / num_perm)
        standard_error = binomial_sd / np.sqrt(len(seeds)) + 1e-3
        assert abs(np.mean(ours) - truth) < 4 * standard_error
        assert abs(np.mean(theirs) - truth) < 4 * standard_error
        if 0.05 < truth < 0.95:
            ratio = np.var(ours) / np.var(theirs)
            assert 0.4 < ratio < 2.5, (truth, np.var(ours), np.var(theirs))


@settings(max_examples=100, deadline=None)
@given(
    st.integers(1, 40).flatmap(
        lambda n: st.tuples(
            st.just(n), st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=60)
        )
    )
)
def test_union_find_matches_a_reference(case: tuple[int, list[tuple[int, int]]]) -> None:
    n, pairs = case
    uf = ref.UnionFind(n)
    half = len(pairs) // 2
    for chunk in (pairs[:half], pairs[half:]):
        if chunk:
            u, v = np.array(chunk).T
            uf.union(u, v)
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            x = parent[x]
        return x

    for a, b in pairs:
        ra, rb = find(a), find(b)
        parent[max(ra, rb)] = min(ra, rb)
    assert uf.roots().tolist() == [find(x) for x in range(n)]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(2, 30), min_size=1, max_size=8))
def test_group_pairs_connect_every_group(sizes: list[int]) -> None:
    members = np.arange(sum(sizes))
    starts = np.cumsum([0, *sizes[:-1]])
    u, v = lsh.group_pairs(members, starts, np.array(sizes))
    uf = ref.UnionFind(len(members))
    uf.union(u, v)
    roots = uf.roots()
    assert np.array_equal(roots, np.repeat(starts, sizes))
    assert np.all(np.repeat(np.arange(len(sizes)), sizes)[u] == np.repeat(np.arange(len(sizes)), sizes)[v])


def test_pair_jaccard_is_exact() -> None:
    a = np.array([1, 2, 3, 4], dtype=np.uint32)
    b = np.array([3, 4, 5], dtype=np.uint32)
    c = np.zeros(0, dtype=np.uint32)
    assert ref.pair_jaccard([a, a, a], [b, a, c]).tolist() == [pytest.approx(2 / 5), 1.0, 0.0]


@settings(max_examples=60, deadline=None)
@given(st.lists(texts, min_size=1, max_size=8), st.integers(1, 9))
def test_signatures_are_the_minimum_over_each_document(batch: list[str], seed: int) -> None:
    shingles = mh.shingle_batch(batch)
    hasher = lsh.MinHasher(16, seed)
    sig = hasher.signatures(shingles)
    for i in range(len(batch)):
        x = shingles.shingles(i)
        expected = (x[:, None] * hasher.a[None, :]).min(axis=0) if x.size else np.full(16, 0xFFFFFFFF)
        assert np.array_equal(sig[i], expected)


def test_long_batches_are_cut_without_changing_the_shingles(monkeypatch: pytest.MonkeyPatch) -> None:
    docs = [d["text"] for d in real_docs()]
    whole = mh.shingle_batch(docs)
    monkeypatch.setattr(mh, "MAX_BATCH_CHARS", 500)
    cut = mh.shingle_batch(docs)
    assert np.array_equal(whole.offsets, cut.offsets)
    assert np.array_equal(whole.hashes, cut.hashes)
    assert np.array_equal(whole.cjk, cut.cjk)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(st.sets(st.integers(0, 30), max_size=12), st.sets(st.integers(0, 30), max_size=12)),
        max_size=6,
    )
)
def test_pair_jaccard_flat_matches_python_sets(pairs: list[tuple[set[int], set[int]]]) -> None:
    left = [np.array(sorted(a), dtype=np.uint32) for a, _ in pairs]
    right = [np.array(sorted(b), dtype=np.uint32) for _, b in pairs]
    expected = [len(a & b) / len(a | b) if a | b else 1.0 for a, b in pairs]
    assert ref.pair_jaccard(left, right).tolist() == pytest.approx(expected)
