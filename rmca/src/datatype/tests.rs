//! Datatypes against a naive model that lists every byte of a layout one by one, and the
//! builder against arbitrary (hostile) arguments.

use proptest::prelude::*;

use super::*;

/// A layout as the constructors describe it, interpreted byte by byte.
#[derive(Clone, Debug)]
enum Model {
    /// An element type: (size, align).
    Elem(usize, usize),
    Contig(usize, Box<Model>),
    Vector(usize, usize, isize, Box<Model>),
    HVector(usize, usize, isize, Box<Model>),
    Indexed(Vec<usize>, Vec<isize>, Box<Model>),
    HIndexed(Vec<usize>, Vec<isize>, Box<Model>),
    Struct(Vec<(usize, isize, Model)>),
    Resized(Box<Model>, isize, isize),
    /// (sizes, subsizes, starts), row-major.
    Subarray(Vec<usize>, Vec<usize>, Vec<usize>, Box<Model>),
}

/// A 3-byte element with alignment 1.
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
struct Odd([u8; 3]);

/// What the naive model knows of a layout: the offset of every byte in type-map order,
/// the bounds, the alignment.
#[derive(Debug)]
struct Naive {
    bytes: Vec<i128>,
    lb: i128,
    ub: i128,
    align: usize,
}

impl Model {
    fn naive(&self) -> Naive {
        // Blocks of (byte displacement, copies, child).
        let blocks = |list: Vec<(i128, usize, Naive)>, round: bool| {
            let mut bytes = Vec::new();
            let (mut lb, mut ub): (Option<i128>, Option<i128>) = (None, None);
            let mut align = 1;
            for (disp, n, child) in list {
                align = align.max(child.align);
                let ext = child.ub - child.lb;
                for k in 0..n as i128 {
                    let base = disp + k * ext;
                    bytes.extend(child.bytes.iter().map(|b| base + b));
                    lb = Some(lb.map_or(base + child.lb, |l| l.min(base + child.lb)));
                    ub = Some(ub.map_or(base + child.ub, |u| u.max(base + child.ub)));
                }
            }
            let (lb, mut ub) = (lb.unwrap_or(0), ub.unwrap_or(0));
            if round && ub > lb {
                while (ub - lb) % align as i128 != 0 {
                    ub += 1;
                }
            }
            Naive {
                bytes,
                lb,
                ub,
                align,
            }
        };
        match self {
            Model::Elem(size, align) => Naive {
                bytes: (0..*size as i128).collect(),
                lb: 0,
                ub: *size as i128,
                align: *align,
            },
            Model::Contig(n, m) => blocks(vec![(0, *n, m.naive())], false),
            Model::Vector(count, bl, stride, m) => {
                let ext = {
                    let c = m.naive();
                    c.ub - c.lb
                };
                let list = (0..*count as i128)
                    .map(|i| (i * *stride as i128 * ext, *bl, m.naive()))
                    .collect();
                let mut t = blocks(list, false);
                if *count == 0 {
                    t.align = m.naive().align;
                }
                t
            }
            Model::HVector(count, bl, stride, m) => {
                let list = (0..*count as i128)
                    .map(|i| (i * *stride as i128, *bl, m.naive()))
                    .collect();
                let mut t = blocks(list, false);
                if *count == 0 {
                    t.align = m.naive().align;
                }
                t
            }
            Model::Indexed(bls, displs, m) => {
                let c = m.naive();
                let ext = c.ub - c.lb;
                let list = bls
                    .iter()
                    .zip(displs)
                    .map(|(&n, &d)| (d as i128 * ext, n, m.naive()))
                    .collect();
                blocks(list, false)
            }
            Model::HIndexed(bls, displs, m) => {
                let list = bls
                    .iter()
                    .zip(displs)
                    .map(|(&n, &d)| (d as i128, n, m.naive()))
                    .collect();
                blocks(list, false)
            }
            Model::Struct(fields) => blocks(
                fields
                    .iter()
                    .map(|(n, d, m)| (*d as i128, *n, m.naive()))
                    .collect(),
                true,
            ),
            Model::Subarray(sizes, subsizes, starts, m) => {
                let c = m.naive();
                let ext = c.ub - c.lb;
                // Every index of the block, last dimension fastest.
                let mut bytes = Vec::new();
                let mut idx = vec![0usize; sizes.len()];
                let cells: usize = subsizes.iter().product();
                for _ in 0..cells {
                    let mut linear = 0i128;
                    for d in 0..sizes.len() {
                        linear = linear * sizes[d] as i128 + (starts[d] + idx[d]) as i128;
                    }
                    bytes.extend(c.bytes.iter().map(|b| linear * ext + b));
                    for d in (0..sizes.len()).rev() {
                        idx[d] += 1;
                        if idx[d] < subsizes[d] {
                            break;
                        }
                        idx[d] = 0;
                    }
                }
                Naive {
                    bytes,
                    lb: 0,
                    ub: sizes.iter().product::<usize>() as i128 * ext,
                    align: c.align,
                }
            }
            Model::Resized(m, lb, extent) => {
                let c = m.naive();
                Naive {
                    bytes: c.bytes,
                    lb: *lb as i128,
                    ub: *lb as i128 + *extent as i128,
                    align: c.align,
                }
            }
        }
    }

    fn build(&self) -> Result<Datatype, DatatypeError> {
        match self {
            Model::Elem(1, _) => Ok(Datatype::of::<u8>()),
            Model::Elem(2, _) => Ok(Datatype::of::<u16>()),
            Model::Elem(3, _) => Ok(Datatype::of::<Odd>()),
            Model::Elem(4, _) => Ok(Datatype::of::<u32>()),
            Model::Elem(_, _) => Ok(Datatype::of::<u64>()),
            Model::Contig(n, m) => Datatype::contiguous(*n, &m.build()?),
            Model::Vector(c, b, s, m) => Datatype::vector(*c, *b, *s, &m.build()?),
            Model::HVector(c, b, s, m) => Datatype::hvector(*c, *b, *s, &m.build()?),
            Model::Indexed(b, d, m) => Datatype::indexed(b, d, &m.build()?),
            Model::HIndexed(b, d, m) => Datatype::hindexed(b, d, &m.build()?),
            Model::Struct(f) => {
                let types = f
                    .iter()
                    .map(|(_, _, m)| m.build())
                    .collect::<Result<Vec<_>, _>>()?;
                let bls: Vec<usize> = f.iter().map(|x| x.0).collect();
                let ds: Vec<isize> = f.iter().map(|x| x.1).collect();
                Datatype::structure(&bls, &ds, &types)
            }
            Model::Resized(m, lb, e) => Datatype::resized(&m.build()?, *lb, *e),
            Model::Subarray(sz, sub, st, m) => Datatype::subarray(sz, sub, st, &m.build()?),
        }
    }
}

fn elem() -> impl Strategy<Value = Model> {
    prop_oneof![
        Just(Model::Elem(1, 1)),
        Just(Model::Elem(2, 2)),
        Just(Model::Elem(3, 1)),
        Just(Model::Elem(4, 4)),
        Just(Model::Elem(8, 8)),
    ]
}

/// Small nested layouts, negative strides and displacements included.
fn model() -> impl Strategy<Value = Model> {
    elem().prop_recursive(3, 24, 4, |inner| {
        let b = inner.clone().prop_map(Box::new);
        prop_oneof![
            (0usize..4, b.clone()).prop_map(|(n, m)| Model::Contig(n, m)),
            (0usize..4, 0usize..3, -3isize..5, b.clone())
                .prop_map(|(c, bl, s, m)| Model::Vector(c, bl, s, m)),
            (0usize..4, 0usize..3, -20isize..40, b.clone())
                .prop_map(|(c, bl, s, m)| Model::HVector(c, bl, s, m)),
            (
                prop::collection::vec((0usize..3, -4isize..8), 0..4),
                b.clone()
            )
                .prop_map(|(v, m)| {
                    let (bl, d) = v.into_iter().unzip();
                    Model::Indexed(bl, d, m)
                }),
            (
                prop::collection::vec((0usize..3, -16isize..48), 0..4),
                b.clone()
            )
                .prop_map(|(v, m)| {
                    let (bl, d) = v.into_iter().unzip();
                    Model::HIndexed(bl, d, m)
                }),
            prop::collection::vec((0usize..3, -16isize..48, inner.clone()), 1..4)
                .prop_map(Model::Struct),
            (b.clone(), -8isize..8, -24isize..48).prop_map(|(m, lb, e)| Model::Resized(m, lb, e)),
            (
                prop::collection::vec((1usize..5, 0usize..5, 0usize..5), 1..4),
                b
            )
                .prop_map(|(dims, m)| {
                    let sizes: Vec<usize> = dims.iter().map(|d| d.0).collect();
                    let starts: Vec<usize> = dims.iter().map(|d| d.1 % d.0).collect();
                    let subsizes = dims
                        .iter()
                        .zip(&starts)
                        .map(|(d, st)| d.2 % (d.0 - st + 1))
                        .collect();
                    Model::Subarray(sizes, subsizes, starts, m)
                }),
        ]
    })
}

/// Every byte `count` instances name, in order.
fn naive_offsets(n: &Naive, count: usize) -> Vec<i128> {
    let ext = n.ub - n.lb;
    (0..count as i128)
        .flat_map(|i| n.bytes.iter().map(move |b| i * ext + b))
        .collect()
}

/// A deterministic byte pattern.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 768, ..ProptestConfig::default() })]

    #[test]
    fn committed_layout_matches_the_naive_model(m in model()) {
        check_layout(m)?;
    }

    #[test]
    fn pack_and_unpack_match_byte_by_byte_copies(
        m in model(),
        count in 0usize..4,
        slack in 0usize..5,
        seed in any::<u8>(),
        cut in 0usize..64,
    ) {
        check_pack(m, count, slack, seed, cut)?;
    }

    /// The same with every constructor's layout kept nested (not flattened).
    #[test]
    fn nested_layouts_match_the_naive_model(
        m in model(),
        count in 0usize..4,
        slack in 0usize..5,
        seed in any::<u8>(),
        cut in 0usize..64,
    ) {
        FLATTEN_OVERRIDE.with(|o| o.set(Some(1)));
        let r = check_layout(m.clone()).and_then(|()| check_pack(m, count, slack, seed, cut));
        FLATTEN_OVERRIDE.with(|o| o.set(None));
        r?;
    }
}

fn check_layout(m: Model) -> Result<(), TestCaseError> {
    let naive = m.naive();
    let t = m.build().expect("small layouts build");
    prop_assert_eq!(t.size(), naive.bytes.len());
    prop_assert_eq!(t.lb() as i128, naive.lb);
    prop_assert_eq!(t.extent() as i128, naive.ub - naive.lb);
    if let (Some(lo), Some(hi)) = (naive.bytes.iter().min(), naive.bytes.iter().max()) {
        prop_assert_eq!(t.true_lb() as i128, *lo);
        prop_assert_eq!(t.true_extent() as i128, hi + 1 - lo);
    }
    // The segments are the bytes, merged: expanding them gives the byte list back, and
    // no two consecutive segments touch.
    let expanded: Vec<i128> = t
        .segments()
        .iter()
        .flat_map(|s| (0..s.len as i128).map(move |k| s.offset as i128 + k))
        .collect();
    prop_assert_eq!(&expanded, &naive.bytes);
    for w in t.segments().windows(2) {
        prop_assert!(
            w[0].offset + w[0].len as isize != w[1].offset,
            "unmerged {:?}",
            w
        );
    }
    Ok(())
}

fn check_pack(
    m: Model,
    count: usize,
    slack: usize,
    seed: u8,
    cut: usize,
) -> Result<(), TestCaseError> {
    // Shift the layout so that every byte its instances name is inside the buffer.
    let lowest = naive_offsets(&m.naive(), count)
        .into_iter()
        .min()
        .unwrap_or(0);
    let m = if lowest < 0 {
        Model::HIndexed(vec![1], vec![-lowest as isize], Box::new(m))
    } else {
        m
    };
    let naive = m.naive();
    let t = m.build().expect("small layouts build");
    let offsets = naive_offsets(&naive, count);
    let end = offsets.iter().map(|o| *o as usize + 1).max().unwrap_or(0);
    let buf = pattern(end + slack, seed);

    // Pack.
    let want: Vec<u8> = offsets.iter().map(|&o| buf[o as usize]).collect();
    prop_assert_eq!(t.pack_size(count).unwrap(), want.len());
    let packed = t.pack_to_vec(&buf, count).unwrap();
    prop_assert_eq!(&packed, &want);

    // One byte short: refused, nothing read out of bounds.
    if end > 0 {
        let short = t.pack_to_vec(&buf[..end - 1], count);
        let refused = matches!(short, Err(DatatypeError::OutOfBounds { .. }));
        prop_assert!(refused, "{:?}", short);
    }

    // Unpack (all of it, and a prefix as a shorter message would be): refused when some
    // byte is named twice, else exactly the named bytes change.
    let mut sorted = offsets.clone();
    sorted.sort_unstable();
    let overlaps = sorted.windows(2).any(|w| w[0] == w[1]);
    let src = pattern(want.len(), seed.wrapping_add(101));
    for take in [want.len(), cut.min(want.len())] {
        let mut got = vec![0xEEu8; buf.len()];
        let r = t.unpack(&src[..take], &mut got, count);
        if overlaps {
            let refused = matches!(
                r,
                Err(DatatypeError::Overlap { .. } | DatatypeError::OverlapBySize { .. })
            );
            prop_assert!(refused, "{:?}", r);
            continue;
        }
        prop_assert_eq!(r, Ok(take));
        let mut expect = vec![0xEEu8; buf.len()];
        for (i, &o) in offsets.iter().take(take).enumerate() {
            expect[o as usize] = src[i];
        }
        prop_assert_eq!(&got, &expect);
    }
    // A packed buffer longer than the instances is refused.
    let mut sink = vec![0u8; buf.len()];
    let too_long = t.unpack(&pattern(want.len() + 1, 0), &mut sink, count);
    let refused = matches!(
        too_long,
        Err(DatatypeError::PackedLength { .. }
            | DatatypeError::Overlap { .. }
            | DatatypeError::OverlapBySize { .. })
    );
    prop_assert!(refused, "{:?}", too_long);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Any arguments at all: an error or a consistent type, never a panic, a hang or an
    /// allocation beyond FLATTEN_LIMIT runs.
    #[test]
    fn builder_never_panics_on_any_input(
        base in model(),
        counts in prop::collection::vec(any::<usize>(), 1..4),
        small in prop::collection::vec(0usize..1 << 16, 1..4),
        strides in prop::collection::vec(any::<isize>(), 1..4),
        which in 0u8..9,
        use_count in 0usize..1 << 20,
        buf_len in any::<usize>(),
    ) {
        let old = base.build().expect("small layouts build");
        let c = |i: usize| if which % 2 == 0 { counts[i % counts.len()] } else { small[i % small.len()] };
        let s = |i: usize| strides[i % strides.len()];
        let r = match which {
            0 | 1 => Datatype::contiguous(c(0), &old),
            2 | 3 => Datatype::vector(c(0), c(1), s(0), &old),
            4 => Datatype::hvector(c(0), c(1), s(0), &old),
            5 => Datatype::indexed(&[c(0), c(1)], &strides, &old),
            6 => Datatype::hindexed(&counts[..1], &strides[..1], &old),
            7 => Datatype::resized(&old, s(0), s(1)),
            _ => {
                let types = vec![old.clone(); counts.len()];
                Datatype::structure(&counts, &strides, &types)
            }
        };
        if let Ok(t) = r {
            if t.pieces() <= FLATTEN_LIMIT as u128 {
                let total: usize = t.segments().iter().map(|s| s.len).sum();
                prop_assert_eq!(total, t.size());
                prop_assert!(t.segments().iter().all(|s| s.len > 0));
            } else {
                prop_assert!(!matches!(t.map.layout, Layout::Flat(_)));
            }
            // Using it with any count against any length: answers, never panics.
            let _ = t.check_bounds(use_count, buf_len);
            let _ = t.pack_size(use_count);
            if t.check_bounds(use_count, 4096).is_ok() {
                let _ = t.check_no_overlap(use_count);
                let mut small_out = [0u8; 64];
                let _ = t.pack(&[0u8; 4096], use_count, &mut small_out);
                let _ = t.unpack(&[0u8; 16], &mut [0u8; 4096], use_count);
            }
        }
    }
}

#[test]
fn construction_errors_name_the_problem() {
    let f64t = Datatype::of::<f64>();
    // A negative extent is MPI's: instances go down in memory.
    let down = Datatype::resized(&f64t, 8, -8).unwrap();
    assert_eq!((down.lb(), down.extent()), (8, -8));
    let m = [1.0f64, 2.0, 3.0];
    let packed = down.pack_to_vec(&m[2..], 1).unwrap();
    assert_eq!(bytemuck::cast_slice::<u8, f64>(&packed), &[3.0]);
    assert!(
        down.pack_to_vec(&m[2..], 2).is_err(),
        "instance 1 is before the slice"
    );
    let e = Datatype::indexed(&[1, 2], &[0], &f64t).unwrap_err();
    assert!(
        e.to_string()
            .contains("indexed: displacements has 1 entries but there are 2 blocks"),
        "{e}"
    );
    let e = Datatype::structure(&[1], &[0], &[]).unwrap_err();
    assert!(
        matches!(e, DatatypeError::LengthMismatch { what: "types", .. }),
        "{e}"
    );
    let e = Datatype::vector(usize::MAX, 1, 2, &f64t).unwrap_err();
    assert!(matches!(e, DatatypeError::Overflow { .. }), "{e}");
    // A contiguous run of any length is one segment, not one per element.
    let big = Datatype::contiguous(1 << 40, &f64t).unwrap();
    assert_eq!(big.segments().len(), 1);
    assert!(Datatype::contiguous(usize::MAX, &f64t).is_err());
    // Out of bounds and overlaps at use.
    let col = Datatype::vector(3, 1, 4, &f64t).unwrap();
    let m = [0.0f64; 12];
    let e = col.pack_to_vec(&m[5..], 1).unwrap_err();
    assert!(
        e.to_string().contains("outside the buffer of 56 bytes"),
        "{e}"
    );
    let neg = Datatype::hindexed(&[1], &[-8], &f64t).unwrap();
    assert!(matches!(
        neg.pack_to_vec(&m, 1),
        Err(DatatypeError::OutOfBounds { start: -8, .. })
    ));
    let twice = Datatype::hindexed(&[1, 1], &[0, 4], &f64t).unwrap();
    assert!(twice.pack_to_vec(&m, 1).is_ok(), "overlap is fine to read");
    assert!(matches!(
        twice.unpack(&[0; 16], &mut [0.0f64; 2], 1),
        Err(DatatypeError::Overlap { offset: 4, .. })
    ));
}

#[test]
fn subarray_errors_and_faces() {
    let u8t = Datatype::of::<u8>();
    let e = Datatype::subarray(&[4, 4], &[3, 2], &[2, 0], &u8t).unwrap_err();
    assert_eq!(
        e,
        DatatypeError::SubarrayOutOfRange {
            dim: 0,
            start: 2,
            subsize: 3,
            size: 4
        }
    );
    assert!(e
        .to_string()
        .contains("dimension 0: start 2 + subsize 3 exceeds the size 4"));
    assert_eq!(
        Datatype::subarray(&[], &[], &[], &u8t).unwrap_err(),
        DatatypeError::NoDimensions
    );
    assert!(matches!(
        Datatype::subarray(&[4], &[1, 1], &[0], &u8t),
        Err(DatatypeError::LengthMismatch {
            what: "subsizes",
            ..
        })
    ));
    assert!(Datatype::subarray(&[usize::MAX, 4], &[1, 1], &[0, 0], &u8t).is_err());
    // The west face of a 3 x 4 x 5 grid: x = 0, every y and z.
    let face = Datatype::subarray(&[3, 4, 5], &[3, 4, 1], &[0, 0, 0], &u8t).unwrap();
    let grid: Vec<u8> = (0..60).collect();
    let want: Vec<u8> = (0..12).map(|k| k * 5).collect();
    assert_eq!(face.pack_to_vec(&grid, 1).unwrap(), want);
    assert_eq!(face.extent(), 60);
}

#[test]
fn resized_columns_interleave_without_overlap() {
    // The MPI idiom: a column of a 3 × 4 matrix resized to one element, so that instance
    // j is column j.
    let f64t = Datatype::of::<f64>();
    let col = Datatype::vector(3, 1, 4, &f64t).unwrap();
    let col1 = Datatype::resized(&col, 0, 8).unwrap();
    let m: Vec<f64> = (0..12).map(f64::from).collect();
    let packed = col1.pack_to_vec(&m, 4).unwrap();
    let transposed: &[f64] = bytemuck::cast_slice(&packed);
    assert_eq!(
        transposed,
        &[0., 4., 8., 1., 5., 9., 2., 6., 10., 3., 7., 11.]
    );
    let mut back = vec![0.0f64; 12];
    col1.unpack(&packed, &mut back, 4).unwrap();
    assert_eq!(back, m);
    // Checked once, remembered (also for fewer instances).
    assert_eq!(col1.map.disjoint_upto.load(Ordering::Relaxed), 4);
    col1.unpack(&packed[..24], &mut back, 1).unwrap();
    col1.unpack(&packed[..48], &mut back, 2).unwrap();
    assert_eq!(col1.map.disjoint_upto.load(Ordering::Relaxed), 4);
    // Five columns of a four-column matrix would run off its end.
    assert!(col1.pack_to_vec(&m, 5).is_err());
    // Resized to half an element: instances overlap.
    let half = Datatype::resized(&col, 0, 4).unwrap();
    assert!(matches!(
        half.unpack(&[0u8; 48], &mut [0.0f64; 12], 2),
        Err(DatatypeError::Overlap { offset: 4, .. })
    ));
    // Two elements every element: more bytes than room for them, refused without
    // looking at every run.
    let pair = Datatype::resized(&Datatype::contiguous(2, &f64t).unwrap(), 0, 8).unwrap();
    assert_eq!(
        pair.unpack(&[0u8; 64], &mut [0.0f64; 5], 4),
        Err(DatatypeError::OverlapBySize {
            count: 4,
            bytes: 64,
            span: 40
        })
    );
    // A million one-byte runs, two million interleaved instances: answered at once.
    let sparse = Datatype::vector(1 << 20, 1, 2, &Datatype::of::<u8>()).unwrap();
    let dense = Datatype::resized(&sparse, 0, 1).unwrap();
    let mut big = vec![0u8; 4 << 20];
    assert!(matches!(
        dense.unpack(&[], &mut big, 2 << 20),
        Err(DatatypeError::OverlapBySize { .. })
    ));
    // Sending many overlapping instances packs them all: a size beyond memory is an
    // error, not an abort.
    let same = Datatype::resized(&f64t, 0, 0).unwrap();
    assert_eq!(
        same.pack_to_vec(&[1.0f64], 1 << 60),
        Err(DatatypeError::Allocation { bytes: 8 << 60 })
    );
}

#[test]
fn whole_elements_are_recognised() {
    let u32t = Datatype::of::<u32>();
    let f64t = Datatype::of::<f64>();
    let col = Datatype::vector(3, 1, 4, &f64t).unwrap();
    assert_eq!(col.check_whole_elements(8), Ok(()));
    assert_eq!(col.check_whole_elements(4), Ok(()));
    let skewed = Datatype::hindexed(&[1], &[4], &u32t).unwrap();
    assert_eq!(
        skewed.check_whole_elements(8),
        Err(DatatypeError::SplitsElements {
            elem: 8,
            what: "segment offset",
            value: 4
        })
    );
    let short = Datatype::contiguous(3, &u32t).unwrap();
    assert!(matches!(
        short.check_whole_elements(8),
        Err(DatatypeError::SplitsElements {
            what: "segment length",
            ..
        })
    ));
    let odd_extent = Datatype::resized(&f64t, 0, 12).unwrap();
    assert!(matches!(
        odd_extent.check_whole_elements(8),
        Err(DatatypeError::SplitsElements {
            what: "extent",
            value: 12,
            ..
        })
    ));
}

#[test]
fn contiguity_is_recognised() {
    let f64t = Datatype::of::<f64>();
    assert!(f64t.is_contiguous(5));
    let c = Datatype::contiguous(4, &f64t).unwrap();
    assert!(c.is_contiguous(3));
    // A vector whose stride equals its block length is one run.
    assert!(Datatype::vector(3, 2, 2, &f64t).unwrap().is_contiguous(2));
    let col = Datatype::vector(3, 1, 4, &f64t).unwrap();
    assert!(!col.is_contiguous(1));
    // One block of a struct with a hole after it: contiguous once, not twice.
    let padded = Datatype::resized(&f64t, 0, 16).unwrap();
    assert!(padded.is_contiguous(1) && !padded.is_contiguous(2));
    assert_eq!(padded.instances(24), Some(3));
    assert_eq!(padded.instances(20), None);
}

#[test]
fn huge_layouts_stay_nested() {
    // MPICH's test suite: 135 M single bytes, two apart. Built without a run list.
    let u8t = Datatype::of::<u8>();
    let v = Datatype::vector(135_000_000, 1, 2, &u8t).unwrap();
    assert_eq!((v.size(), v.extent()), (135_000_000, 269_999_999));
    assert!(matches!(v.map.layout, Layout::Strided { .. }));
    assert_eq!(v.pieces(), 135_000_000);
    // Nested: a struct of vectors of vectors, every run visited in order without a list.
    let rows = Datatype::vector(300, 2, 3, &u8t).unwrap();
    let planes = Datatype::hvector(500, 1, 1000, &rows).unwrap();
    assert!(matches!(planes.map.layout, Layout::Strided { .. }));
    let t = Datatype::structure(&[1, 2], &[0, 600_000], &[planes.clone(), u8t.clone()]).unwrap();
    assert!(!matches!(t.map.layout, Layout::Flat(_)));
    assert_eq!(t.size(), 300 * 2 * 500 + 2);
    let buf: Vec<u8> = (0..700_000u32).map(|i| (i % 251) as u8).collect();
    let packed = t.pack_to_vec(&buf, 1).unwrap();
    let mut want = Vec::new();
    for p in 0..500 {
        for r in 0..300 {
            let at = p * 1000 + r * 3;
            want.extend_from_slice(&buf[at..at + 2]);
        }
    }
    want.extend_from_slice(&buf[600_000..600_002]);
    assert_eq!(packed, want);
    let mut back = vec![0u8; 700_000];
    assert_eq!(t.unpack(&packed, &mut back, 1), Ok(packed.len()));
    for (i, (&b, &o)) in back.iter().zip(&buf).enumerate() {
        let named =
            i == 600_000 || i == 600_001 || (i < 500_000 && i % 1000 < 900 && i % 1000 % 3 < 2);
        assert_eq!(b, if named { o } else { 0 }, "byte {i}");
    }
    // A nested type that names bytes twice is refused for receiving, found without a list.
    let twice = Datatype::hvector(1 << 20, 2, 1, &u8t).unwrap();
    assert!(matches!(
        twice.unpack(&[], &mut vec![0u8; 2 << 20], 1),
        Err(DatatypeError::Overlap { .. })
    ));
    // Interleaved huge blocks (not apart by their span): checked by listing, still right.
    let even = Datatype::vector(40_000, 1, 2, &u8t).unwrap();
    let odd = Datatype::hindexed(&[1, 1], &[0, 1], &even).unwrap();
    assert_eq!(odd.map.self_overlap(), None);
    let clash = Datatype::hindexed(&[1, 1], &[0, 2], &even).unwrap();
    assert_eq!(clash.map.self_overlap(), Some(2));
}

#[test]
fn negative_extents_follow_mpi() {
    // MPICH's lbub test: 4 bytes resized to lb 6, extent -9; three of them.
    let four = Datatype::contiguous(4, &Datatype::of::<u8>()).unwrap();
    let neg = Datatype::resized(&four, 6, -9).unwrap();
    assert_eq!((neg.lb(), neg.extent()), (6, -9));
    let three = Datatype::contiguous(3, &neg).unwrap();
    assert_eq!(three.size(), 12);
    assert_eq!((three.lb(), three.extent()), (-12, 9));
    assert_eq!((three.true_lb(), three.true_extent()), (-18, 22));
    let buf: Vec<u8> = (0..22).collect();
    // Shifted by 18 so that every byte is in the slice: copy k at -9k.
    let shifted = Datatype::hindexed(&[1], &[18], &three).unwrap();
    assert_eq!(
        shifted.pack_to_vec(&buf, 1).unwrap(),
        [18, 19, 20, 21, 9, 10, 11, 12, 0, 1, 2, 3]
    );
}

#[test]
fn evenly_spaced_runs_take_the_tight_loop_and_match_the_walk() {
    // Each layout below is one run per instance or a vector of a dense child: packed by
    // `UniformRuns`, compared with what a run-by-run copy through `for_each_run` gives,
    // whole and cut inside a run.
    let u8t = Datatype::of::<u8>();
    let i32t = Datatype::of::<i32>();
    // Vectors stay nested (small ones are flattened otherwise).
    FLATTEN_OVERRIDE.with(|o| o.set(Some(1)));
    let byte_every_2 = Datatype::resized(&u8t, 0, 2).unwrap();
    let vec_i32 = Datatype::vector(5, 3, 4, &i32t).unwrap();
    let vec_continued = Datatype::resized(&vec_i32, 0, 5 * 16).unwrap();
    // Negative stride, shifted into the buffer (offsets are from the buffer's start).
    let vec_neg = Datatype::vector(4, 1, -3, &i32t).unwrap();
    let vec_neg = Datatype::hindexed(&[1], &[36], &vec_neg).unwrap();
    let odd = Datatype::resized(&Datatype::contiguous(3, &u8t).unwrap(), 0, 7).unwrap();
    FLATTEN_OVERRIDE.with(|o| o.set(None));
    // The same vector flattened: its segments are evenly spaced too.
    let flat_vec = Datatype::resized(&Datatype::vector(5, 3, 4, &i32t).unwrap(), 0, 80).unwrap();
    for (t, count) in [
        (&flat_vec, 3),
        (&byte_every_2, 1000),
        (&vec_i32, 1),
        (&vec_continued, 3),
        (&vec_neg, 1),
        (&odd, 9),
    ] {
        assert!(t.uniform_runs(count).is_some(), "{t:?}");
        let span = t.true_lb() as usize + t.true_extent() + (count - 1) * t.extent().unsigned_abs();
        let src: Vec<u8> = (0..span).map(|i| (i * 7 + 3) as u8).collect();
        let mut want = Vec::new();
        t.for_each_run(count, |at, len| {
            let at = at as usize;
            want.extend_from_slice(&src[at..at + len]);
            true
        });
        let mut packed = vec![0u8; t.size() * count];
        t.pack_unchecked(&src, count, &mut packed);
        assert_eq!(packed, want, "{t:?}");
        for cut in [packed.len(), packed.len() - 1, packed.len() / 2 + 1] {
            let mut back = vec![0u8; span];
            t.unpack_unchecked(&packed[..cut], &mut back, count);
            let mut pos = 0;
            t.for_each_run(count, |at, len| {
                let at = at as usize;
                let n = len.min(cut - pos);
                assert_eq!(&back[at..at + n], &src[at..at + n], "{t:?} cut {cut}");
                pos += n;
                pos < cut
            });
        }
    }
}
