// The partial result of a fused pass over some elements of one row, how two
// of them merge (a covers elements before b), and how a row's partial is
// read from and written to the state arrays.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device_traits.cuh"
#include "opfam/arg.cuh"
#include "opfam/extreme.cuh"
#include "opfam/moments.cuh"
#include "opfam/sum.cuh"

namespace tally::kernels::detail {

template <rules::DType D>
struct Partial {
  using S = typename DevTraits<D>::S;
  using E = typename DevTraits<D>::E;
  S sum;
  E min;
  E max;
  double sumsq;
  rules::Moments mom;
  rules::ArgCandidate<E> amin;
  rules::ArgCandidate<E> amax;
  // Masked plans: the valid elements. NaN-skipping ops (float dtypes): the
  // same fields over the valid elements that are not NaN.
  unsigned long long count;
  double nsum;
  unsigned long long ncount;
  E nmin;
  E nmax;
  rules::Moments nmom;
  rules::ArgCandidate<E> namin;
  rules::ArgCandidate<E> namax;
};

template <rules::DType D>
TALLY_DEV Partial<D> IdentityPartial() {
  using X = ExtremeOp<D>;
  Partial<D> p;
  p.sum = SumOp<D>::Identity();
  p.min = static_cast<typename DevTraits<D>::E>(X::MinIdentity());
  p.max = static_cast<typename DevTraits<D>::E>(X::MaxIdentity());
  p.sumsq = 0.0;
  p.mom = rules::Moments{};
  p.amin = {p.min, -1};
  p.amax = {p.max, -1};
  p.count = 0;
  p.nsum = 0.0;
  p.ncount = 0;
  p.nmin = p.min;
  p.nmax = p.max;
  p.nmom = rules::Moments{};
  p.namin = p.amin;
  p.namax = p.amax;
  return p;
}

template <rules::DType D>
TALLY_DEV void MergeInto(Partial<D>& a, const Partial<D>& b, const Want& w) {
  if (w.sum) a.sum = SumOp<D>::Merge(a.sum, b.sum);
  if (w.min) a.min = ExtremeOp<D>::MergeMin(a.min, b.min);
  if (w.max) a.max = ExtremeOp<D>::MergeMax(a.max, b.max);
  if (w.sumsq) a.sumsq = a.sumsq + b.sumsq;
  if (w.moments) a.mom = rules::MergeMoments(a.mom, b.mom);
  if (w.argmin) a.amin = ArgOp<D, false>::Merge(a.amin, b.amin);
  if (w.argmax) a.amax = ArgOp<D, true>::Merge(a.amax, b.amax);
  if (w.count) a.count += b.count;
  if (w.nsum) a.nsum = a.nsum + b.nsum;
  if (w.ncount) a.ncount += b.ncount;
  // No NaN in these: MinNan/MaxNan are the plain extremes here.
  if (w.nmin) a.nmin = ExtremeOp<D>::MergeMin(a.nmin, b.nmin);
  if (w.nmax) a.nmax = ExtremeOp<D>::MergeMax(a.nmax, b.nmax);
  if (w.nmom) a.nmom = rules::MergeMoments(a.nmom, b.nmom);
  if (w.namin) a.namin = ArgOp<D, false>::Merge(a.namin, b.namin);
  if (w.namax) a.namax = ArgOp<D, true>::Merge(a.namax, b.namax);
}

// The partner lane's value; types narrower than 32 bits travel as an int.
template <typename V>
TALLY_DEV V ShflXor(V v, int lane_mask, int width) {
  if constexpr (sizeof(V) < 4) {
    return static_cast<V>(__shfl_xor_sync(0xffffffffu, static_cast<int>(v), lane_mask, width));
  } else {
    return __shfl_xor_sync(0xffffffffu, v, lane_mask, width);
  }
}

// The partner lane's partial (butterfly step), fields in `w` only.
template <rules::DType D>
TALLY_DEV Partial<D> ShflXor(const Partial<D>& p, int lane_mask, int width, const Want& w) {
  Partial<D> q = p;
  if (w.sum) q.sum = ShflXor(p.sum, lane_mask, width);
  if (w.min) q.min = ShflXor(p.min, lane_mask, width);
  if (w.max) q.max = ShflXor(p.max, lane_mask, width);
  if (w.sumsq) q.sumsq = ShflXor(p.sumsq, lane_mask, width);
  if (w.moments) {
    q.mom.count = ShflXor(p.mom.count, lane_mask, width);
    q.mom.mean = ShflXor(p.mom.mean, lane_mask, width);
    q.mom.m2 = ShflXor(p.mom.m2, lane_mask, width);
  }
  if (w.argmin) {
    q.amin.value = ShflXor(p.amin.value, lane_mask, width);
    q.amin.index = ShflXor(p.amin.index, lane_mask, width);
  }
  if (w.argmax) {
    q.amax.value = ShflXor(p.amax.value, lane_mask, width);
    q.amax.index = ShflXor(p.amax.index, lane_mask, width);
  }
  if (w.count) q.count = ShflXor(p.count, lane_mask, width);
  if (w.nsum) q.nsum = ShflXor(p.nsum, lane_mask, width);
  if (w.ncount) q.ncount = ShflXor(p.ncount, lane_mask, width);
  if (w.nmin) q.nmin = ShflXor(p.nmin, lane_mask, width);
  if (w.nmax) q.nmax = ShflXor(p.nmax, lane_mask, width);
  if (w.nmom) {
    q.nmom.count = ShflXor(p.nmom.count, lane_mask, width);
    q.nmom.mean = ShflXor(p.nmom.mean, lane_mask, width);
    q.nmom.m2 = ShflXor(p.nmom.m2, lane_mask, width);
  }
  if (w.namin) {
    q.namin.value = ShflXor(p.namin.value, lane_mask, width);
    q.namin.index = ShflXor(p.namin.index, lane_mask, width);
  }
  if (w.namax) {
    q.namax.value = ShflXor(p.namax.value, lane_mask, width);
    q.namax.index = ShflXor(p.namax.index, lane_mask, width);
  }
  return q;
}

// The 8-byte words of a Partial that the fields in `w` occupy (bit i: word
// i). Partials cross blocks as these words only: kSimple's sum, min and max
// are 2 of Partial<float32>'s 10 words.
TALLY_HD constexpr unsigned WordSpan(std::size_t offset, std::size_t size) {
  unsigned m = 0;
  for (std::size_t i = offset / 8; i < (offset + size + 7) / 8; ++i) m |= 1u << i;
  return m;
}
template <rules::DType D>
TALLY_HD unsigned PartialWords(const Want& w) {
  using P = Partial<D>;
  static_assert(sizeof(P) % 8 == 0 && sizeof(P) / 8 <= 32);
  unsigned m = 0;
  if (w.sum) m |= WordSpan(offsetof(P, sum), sizeof(P::sum));
  if (w.min) m |= WordSpan(offsetof(P, min), sizeof(P::min));
  if (w.max) m |= WordSpan(offsetof(P, max), sizeof(P::max));
  if (w.sumsq) m |= WordSpan(offsetof(P, sumsq), sizeof(P::sumsq));
  if (w.moments) m |= WordSpan(offsetof(P, mom), sizeof(P::mom));
  if (w.argmin) m |= WordSpan(offsetof(P, amin), sizeof(P::amin));
  if (w.argmax) m |= WordSpan(offsetof(P, amax), sizeof(P::amax));
  if (w.count) m |= WordSpan(offsetof(P, count), sizeof(P::count));
  if (w.nsum) m |= WordSpan(offsetof(P, nsum), sizeof(P::nsum));
  if (w.ncount) m |= WordSpan(offsetof(P, ncount), sizeof(P::ncount));
  if (w.nmin) m |= WordSpan(offsetof(P, nmin), sizeof(P::nmin));
  if (w.nmax) m |= WordSpan(offsetof(P, nmax), sizeof(P::nmax));
  if (w.nmom) m |= WordSpan(offsetof(P, nmom), sizeof(P::nmom));
  if (w.namin) m |= WordSpan(offsetof(P, namin), sizeof(P::namin));
  if (w.namax) m |= WordSpan(offsetof(P, namax), sizeof(P::namax));
  return m;
}

// Partials written by one block and read by another in the same launch go
// through L2 (st/ld .cg), never a stale L1 line; only the words in `words`
// (PartialWords), the rest of a loaded partial is the identity.
template <rules::DType D>
TALLY_DEV void StorePartialCg(Partial<D>* dst, const Partial<D>& p, unsigned words) {
  auto* d = reinterpret_cast<unsigned long long*>(dst);
  const auto* s = reinterpret_cast<const unsigned long long*>(&p);
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(Partial<D>) / 8); ++i)
    if (words >> i & 1u) __stcg(d + i, s[i]);
}
template <rules::DType D>
TALLY_DEV Partial<D> LoadPartialCg(const Partial<D>* src, unsigned words) {
  Partial<D> p = IdentityPartial<D>();
  const auto* s = reinterpret_cast<const unsigned long long*>(src);
  auto* d = reinterpret_cast<unsigned long long*>(&p);
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(Partial<D>) / 8); ++i)
    if (words >> i & 1u) d[i] = __ldcg(s + i);
  return p;
}

// The slice tail's flags and fences (SliceKernel), in the PTX memory
// model's terms. Flags are relaxed GPU-scope accesses: coherent in L2, as
// .cg is, and strong, so fences order them. A release fence (acq_rel) puts
// a block's partial before its flag, an acquire fence the merging block's
// partial loads after the flags it saw; only a flag's store followed by
// the loads of the others' needs a sequentially consistent fence, so that
// two blocks finishing together cannot both miss each other's flag.
TALLY_DEV void StoreFlag(unsigned long long* p, unsigned long long v) {
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" : : "l"(p), "l"(v) : "memory");
}
TALLY_DEV unsigned long long LoadFlag(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
TALLY_DEV void FenceAcqRel() { asm volatile("fence.acq_rel.gpu;" : : : "memory"); }
TALLY_DEV void FenceSc() { asm volatile("fence.sc.gpu;" : : : "memory"); }

// Writes row `row` of the state: the partial itself when this pass saw the
// row's first element (`fresh`), else merged after what the state holds.
template <rules::DType D>
TALLY_DEV void StoreRow(const StateView& st, std::uint64_t row, Partial<D> p, bool fresh,
                        const Want& w) {
  using S = typename DevTraits<D>::S;
  using E = typename DevTraits<D>::E;
  if (!fresh) {
    Partial<D> old = p;
    if (w.sum) old.sum = static_cast<S*>(st.sum)[row];
    if (w.min) old.min = static_cast<E*>(st.min)[row];
    if (w.max) old.max = static_cast<E*>(st.max)[row];
    if (w.sumsq) old.sumsq = st.sumsq[row];
    if (w.moments) old.mom = static_cast<rules::Moments*>(st.moments)[row];
    if (w.argmin) old.amin = {static_cast<E*>(st.argmin_value)[row], st.argmin[row]};
    if (w.argmax) old.amax = {static_cast<E*>(st.argmax_value)[row], st.argmax[row]};
    if (w.count) old.count = st.count[row];
    if (w.nsum) old.nsum = st.nan_sum[row];
    if (w.ncount) old.ncount = st.nan_count[row];
    if (w.nmin) old.nmin = static_cast<E*>(st.nan_min)[row];
    if (w.nmax) old.nmax = static_cast<E*>(st.nan_max)[row];
    if (w.nmom) old.nmom = static_cast<rules::Moments*>(st.nan_moments)[row];
    if (w.namin) old.namin = {static_cast<E*>(st.nan_argmin_value)[row], st.nan_argmin[row]};
    if (w.namax) old.namax = {static_cast<E*>(st.nan_argmax_value)[row], st.nan_argmax[row]};
    MergeInto(old, p, w);
    p = old;
  }
  if (w.sum) static_cast<S*>(st.sum)[row] = p.sum;
  if (w.min) static_cast<E*>(st.min)[row] = p.min;
  if (w.max) static_cast<E*>(st.max)[row] = p.max;
  if (w.sumsq) st.sumsq[row] = p.sumsq;
  if (w.moments) static_cast<rules::Moments*>(st.moments)[row] = p.mom;
  if (w.argmin) {
    st.argmin[row] = p.amin.index;
    static_cast<E*>(st.argmin_value)[row] = p.amin.value;
  }
  if (w.argmax) {
    st.argmax[row] = p.amax.index;
    static_cast<E*>(st.argmax_value)[row] = p.amax.value;
  }
  if (w.count) st.count[row] = p.count;
  if (w.nsum) st.nan_sum[row] = p.nsum;
  if (w.ncount) st.nan_count[row] = p.ncount;
  if (w.nmin) static_cast<E*>(st.nan_min)[row] = p.nmin;
  if (w.nmax) static_cast<E*>(st.nan_max)[row] = p.nmax;
  if (w.nmom) static_cast<rules::Moments*>(st.nan_moments)[row] = p.nmom;
  if (w.namin) {
    st.nan_argmin[row] = p.namin.index;
    static_cast<E*>(st.nan_argmin_value)[row] = p.namin.value;
  }
  if (w.namax) {
    st.nan_argmax[row] = p.namax.index;
    static_cast<E*>(st.nan_argmax_value)[row] = p.namax.value;
  }
}

}  // namespace tally::kernels::detail
