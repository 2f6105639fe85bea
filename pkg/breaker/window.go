package breaker

// numBuckets is how many buckets hold the rolling window. Ten keeps the
// window's edge within a tenth of Window and summing it trivially cheap.
const numBuckets = 10

// bucket counts the outcomes recorded during one bucket-wide slice of time,
// the idx-th since the breaker was made.
type bucket struct {
	idx      int64
	ok, fail uint64
}

// window is a fixed ring of buckets: recording reuses the bucket whose slot
// the current time maps to, so nothing is allocated per outcome. Times are
// nanoseconds since the breaker was made and never decrease.
type window struct {
	width   int64 // ns per bucket
	buckets [numBuckets]bucket
}

func (w *window) add(now int64, success bool) {
	i := now / w.width
	b := &w.buckets[i%numBuckets]
	if b.idx != i {
		*b = bucket{idx: i}
	}
	if success {
		b.ok++
	} else {
		b.fail++
	}
}

// counts sums the current bucket and the numBuckets-1 before it.
func (w *window) counts(now int64) (ok, fail uint64) {
	i := now / w.width
	for k := range w.buckets {
		if b := &w.buckets[k]; b.idx > i-numBuckets {
			ok += b.ok
			fail += b.fail
		}
	}
	return ok, fail
}

func (w *window) reset() { w.buckets = [numBuckets]bucket{} }
