//! Derived datatypes across processes: strided matrix columns, a transposition through a
//! resized column type, a struct of mixed fields received into another layout, indexed
//! triangles, halo exchanges and subarray faces with `PROC_NULL` at the edges, truncated and short messages,
//! refused layouts, non-blocking typed requests (test, drop, forget), and typed collectives. Every result is compared with a serial
//! computation (each rank can compute every rank's data). Prints `OK`/`FAIL` per group and
//! a summary line `dtype_check: N ranks, C cases, F failures`; exits non-zero on failure.
//!
//! `rmca-run -n 3 target/release/examples/dtype_check`

use std::mem::{offset_of, size_of};

use rmca::coll::Op;
use rmca::datatype::staged_bytes;
use rmca::framework::pml::StatusError;
use rmca::{scope, Datatype, Dest, Error, Src, Zeroable};

mod common;
use common::Checker;

/// Rows and columns of the small matrices.
const R: usize = 7;
const C: usize = 5;

/// The element at (i, j) of rank `rank`'s matrices.
fn val(rank: usize, i: usize, j: usize) -> f64 {
    (rank * 1_000_000 + i * 1000 + j) as f64
}

/// Rank `rank`'s `rows` × `cols` row-major matrix.
fn matrix(rank: usize, rows: usize, cols: usize) -> Vec<f64> {
    (0..rows * cols)
        .map(|k| val(rank, k / cols, k % cols))
        .collect()
}

#[derive(Clone, Copy, Debug, PartialEq, rmca::Pod, rmca::Zeroable)]
#[bytemuck(crate = "rmca::bytemuck")]
#[repr(C)]
struct Particle {
    pos: [f64; 3],
    id: u32,
    charge: f32,
}

fn particle(rank: usize, k: usize) -> Particle {
    let base = (rank * 100 + k) as f64;
    Particle {
        pos: [base, base + 0.25, base + 0.5],
        id: (rank * 1000 + k) as u32,
        charge: -(k as f32) - 0.5,
    }
}

/// The same particles held field by field (structure of arrays).
#[derive(Clone, Copy, Debug, PartialEq, rmca::Pod, rmca::Zeroable)]
#[bytemuck(crate = "rmca::bytemuck")]
#[repr(C)]
struct Fields {
    pos: [[f64; 3]; K],
    charge: [f32; K],
    id: [u32; K],
}

/// Particles per message.
const K: usize = 32;

fn f64t() -> Datatype {
    Datatype::of::<f64>()
}

/// Column of an R × `cols` matrix, and the same resized to one element (instance j is
/// column j).
fn column(rows: usize, cols: usize) -> (Datatype, Datatype) {
    let col = Datatype::vector(rows, 1, cols as isize, &f64t()).expect("column type");
    let col1 = Datatype::resized(&col, 0, 8).expect("resized column");
    (col, col1)
}

fn columns(c: &mut Checker) -> rmca::Result<()> {
    let w = c.world.clone();
    let (n, me) = (w.size(), w.rank());
    let (to, from) = ((me + 1) % n, (me + n - 1) % n);
    let a = matrix(me, R, C);
    let (col, _) = column(R, C);
    let every = Datatype::vector(R, 1, 2, &f64t())?;
    for j in 0..C {
        let want: Vec<f64> = (0..R).map(|i| val(from, i, j)).collect();
        // Into a contiguous array, with a plain receive.
        let mut got = vec![0.0f64; R];
        scope(|s| {
            let r = w.irecv(s, &mut got, from, 1)?;
            w.send_typed(&a[j..], 1, &col, to, 1)?;
            r.wait().map(|_| ())
        })?;
        c.check(&format!("column {j} into an array"), &got, &want);
        // Into the same column of another matrix, both sides non-blocking.
        let mut b = vec![0.0f64; R * C];
        scope(|s| {
            let r = w.irecv_typed(s, &mut b[j..], 1, &col, from, 2)?;
            let t = w.isend_typed(s, &a[j..], 1, &col, to, 2)?;
            t.wait()?;
            r.wait().map(|_| ())
        })?;
        let got: Vec<f64> = (0..R).map(|i| b[i * C + j]).collect();
        c.check(&format!("column {j} into a column"), &got, &want);
        let untouched = (0..R * C).all(|k| k % C == j || b[k] == 0.0);
        c.ok(
            "column receive writes only the column",
            untouched,
            "other bytes written",
        );
        // Into every other element of a longer array (another stride, same signature).
        let mut evens = vec![-1.0f64; 2 * R];
        scope(|s| {
            let r = w.irecv_typed(s, &mut evens, 1, &every, from, 3)?;
            w.send_typed(&a[j..], 1, &col, to, 3)?;
            r.wait().map(|_| ())
        })?;
        let got: Vec<f64> = evens.iter().step_by(2).copied().collect();
        c.check(&format!("column {j} into a stride of 2"), &got, &want);
        let odd_untouched = evens.iter().skip(1).step_by(2).all(|&x| x == -1.0);
        c.ok(
            "stride-2 receive skips the gaps",
            odd_untouched,
            "gap written",
        );
        // Exchanged with sendrecv_typed, column into stride 2.
        let mut evens = vec![-1.0f64; 2 * R];
        let st = w.sendrecv_typed((&a[j..], 1, &col), to, 4, (&mut evens, 1, &every), from, 4)?;
        let got: Vec<f64> = evens.iter().step_by(2).copied().collect();
        c.check(&format!("column {j} by sendrecv_typed"), &got, &want);
        c.ok(
            "sendrecv_typed status",
            st.bytes == R * 8 && st.source == from,
            format!("{st:?}"),
        );
    }
    Ok(())
}

fn transpose(c: &mut Checker, rows: usize, cols: usize, tag: i32) -> rmca::Result<()> {
    let w = c.world.clone();
    let (n, me) = (w.size(), w.rank());
    let (to, from) = ((me + 1) % n, (me + n - 1) % n);
    let a = matrix(me, rows, cols);
    let (_, col1) = column(rows, cols);
    // The whole matrix as `cols` columns, received contiguously: the transpose.
    let mut t = vec![0.0f64; rows * cols];
    scope(|s| {
        let r = w.irecv(s, &mut t, from, tag)?;
        w.isend_typed(s, &a, cols, &col1, to, tag)?.wait()?;
        r.wait().map(|_| ())
    })?;
    let want: Vec<f64> = (0..rows * cols)
        .map(|k| val(from, k % rows, k / rows))
        .collect();
    c.check(&format!("transpose {rows}x{cols}"), &t, &want);
    // And back through the same type on the receiving side: the original layout.
    let mut b = vec![0.0f64; rows * cols];
    scope(|s| {
        let r = w.irecv_typed(s, &mut b, cols, &col1, from, tag + 1)?;
        w.send(&t, to, tag + 1)?;
        r.wait().map(|_| ())
    })?;
    // What arrives is `from`'s transpose of its own predecessor's matrix.
    let pred = (from + n - 1) % n;
    c.check(
        &format!("un-transpose {rows}x{cols}"),
        &b,
        &matrix(pred, rows, cols),
    );
    Ok(())
}

fn particle_type() -> rmca::Result<Datatype> {
    Ok(Datatype::structure(
        &[3, 1, 1],
        &[
            offset_of!(Particle, pos) as isize,
            offset_of!(Particle, id) as isize,
            offset_of!(Particle, charge) as isize,
        ],
        &[f64t(), Datatype::of::<u32>(), Datatype::of::<f32>()],
    )?)
}

fn structs(c: &mut Checker) -> rmca::Result<()> {
    let w = c.world.clone();
    let (n, me) = (w.size(), w.rank());
    let (to, from) = ((me + 1) % n, (me + n - 1) % n);
    let pt = particle_type()?;
    c.ok(
        "struct extent is the struct size",
        pt.extent() == size_of::<Particle>() as isize,
        format!("{} vs {}", pt.extent(), size_of::<Particle>()),
    );
    let mine: Vec<Particle> = (0..K).map(|k| particle(me, k)).collect();
    let want: Vec<Particle> = (0..K).map(|k| particle(from, k)).collect();
    // Same layout on both sides.
    let mut got = vec![Particle::zeroed(); K];
    scope(|s| {
        let r = w.irecv_typed(s, &mut got, K, &pt, from, 10)?;
        w.send_typed(&mine, K, &pt, to, 10)?;
        r.wait().map(|_| ())
    })?;
    c.check("particles, same layout", &got, &want);
    // Into a structure of arrays: particle k's fields at their arrays' index k, in the same
    // order (f64 × 3, u32, f32).
    let mut blocks = Vec::new();
    let mut displs = Vec::new();
    let mut types = Vec::new();
    for k in 0..K {
        blocks.extend([3, 1, 1]);
        displs.extend([
            (offset_of!(Fields, pos) + k * 24) as isize,
            (offset_of!(Fields, id) + k * 4) as isize,
            (offset_of!(Fields, charge) + k * 4) as isize,
        ]);
        types.extend([f64t(), Datatype::of::<u32>(), Datatype::of::<f32>()]);
    }
    let soa = Datatype::structure(&blocks, &displs, &types)?;
    let mut fields = [Fields::zeroed()];
    let st = scope(|s| {
        let r = w.irecv_typed(s, &mut fields, 1, &soa, from, 11)?;
        w.send_typed(&mine, K, &pt, to, 11)?;
        r.wait()
    })?;
    let f = fields[0];
    let got: Vec<Particle> = (0..K)
        .map(|k| Particle {
            pos: f.pos[k],
            id: f.id[k],
            charge: f.charge[k],
        })
        .collect();
    c.check("particles into a structure of arrays", &got, &want);
    c.ok(
        "struct status counts instances",
        pt.instances(st.bytes) == Some(K),
        format!("{} bytes", st.bytes),
    );
    Ok(())
}

/// Lower triangle (row i: i + 1 elements) of an m × m matrix, and the upper triangle (row
/// i: m - i elements from the diagonal): same element count, another layout.
fn triangles(m: usize) -> rmca::Result<(Datatype, Datatype)> {
    let lower_len: Vec<usize> = (0..m).map(|i| i + 1).collect();
    let lower_at: Vec<isize> = (0..m).map(|i| (i * m) as isize).collect();
    let upper_len: Vec<usize> = (0..m).map(|i| m - i).collect();
    let upper_at: Vec<isize> = (0..m).map(|i| (i * m + i) as isize).collect();
    Ok((
        Datatype::indexed(&lower_len, &lower_at, &f64t())?,
        Datatype::indexed(&upper_len, &upper_at, &f64t())?,
    ))
}

fn indexed(c: &mut Checker) -> rmca::Result<()> {
    let w = c.world.clone();
    let (n, me) = (w.size(), w.rank());
    let (to, from) = ((me + 1) % n, (me + n - 1) % n);
    let m = 9;
    let (lower, upper) = triangles(m)?;
    let a = matrix(me, m, m);
    let mut b = vec![0.0f64; m * m];
    scope(|s| {
        let r = w.irecv_typed(s, &mut b, 1, &upper, from, 20)?;
        w.isend_typed(s, &a, 1, &lower, to, 20)?.wait()?;
        r.wait().map(|_| ())
    })?;
    // Serial: the lower triangle's elements in order, laid into the upper triangle in order.
    let src = matrix(from, m, m);
    let seq: Vec<f64> = (0..m)
        .flat_map(|i| (0..=i).map(move |j| (i, j)))
        .map(|(i, j)| src[i * m + j])
        .collect();
    let mut want = vec![0.0f64; m * m];
    let slots = (0..m).flat_map(|i| (i..m).map(move |j| i * m + j));
    for (slot, v) in slots.zip(seq) {
        want[slot] = v;
    }
    c.check("lower triangle into upper triangle", &b, &want);
    Ok(())
}

/// A 1-D decomposition of a grid with one halo column on each side: each rank sends its
/// first and last interior columns to its neighbours' halos; the outer edges talk to
/// PROC_NULL.
fn halos(c: &mut Checker) -> rmca::Result<()> {
    let w = c.world.clone();
    let (n, me) = (w.size(), w.rank());
    let (h, wd) = (6, 4);
    let cols = wd + 2;
    let mut grid: Vec<f64> = (0..h * cols)
        .map(|k| {
            let (i, j) = (k / cols, k % cols);
            if j == 0 || j == cols - 1 {
                -1.0
            } else {
                val(me, i, j)
            }
        })
        .collect();
    let col = Datatype::vector(h, 1, cols as isize, &f64t())?;
    let west: (Dest, Src) = if me == 0 {
        (rmca::PROC_NULL.into(), rmca::PROC_NULL.into())
    } else {
        ((me - 1).into(), (me - 1).into())
    };
    let east: (Dest, Src) = if me + 1 == n {
        (rmca::PROC_NULL.into(), rmca::PROC_NULL.into())
    } else {
        ((me + 1).into(), (me + 1).into())
    };
    // Send from a copy (the halos are written meanwhile). Both halos are columns of the one
    // grid, so they are received one exchange at a time: everyone sends east and receives
    // from the west, then the other way.
    let src = grid.clone();
    scope(|s| {
        let r = w.irecv_typed(s, &mut grid, 1, &col, west.1, 31)?;
        w.isend_typed(s, &src[wd..], 1, &col, east.0, 31)?.wait()?;
        r.wait().map(|_| ())
    })?;
    scope(|s| {
        let r = w.irecv_typed(s, &mut grid[cols - 1..], 1, &col, east.1, 32)?;
        w.isend_typed(s, &src[1..], 1, &col, west.0, 32)?.wait()?;
        r.wait().map(|_| ())
    })?;
    let west_want: Vec<f64> = (0..h)
        .map(|i| if me == 0 { -1.0 } else { val(me - 1, i, wd) })
        .collect();
    let east_want: Vec<f64> = (0..h)
        .map(|i| if me + 1 == n { -1.0 } else { val(me + 1, i, 1) })
        .collect();
    let west_got: Vec<f64> = (0..h).map(|i| grid[i * cols]).collect();
    let east_got: Vec<f64> = (0..h).map(|i| grid[i * cols + cols - 1]).collect();
    c.check("west halo", &west_got, &west_want);
    c.check("east halo", &east_got, &east_want);
    let interior_kept = (0..h * cols)
        .filter(|k| k % cols != 0 && k % cols != cols - 1)
        .all(|k| grid[k] == src[k]);
    // The interior as a subarray, received into a contiguous block, and a 3-D face (x = 0
    // of a 3 x 4 x 5 box) received into the opposite face (x = 2) of another.
    let interior = Datatype::subarray(&[h, cols], &[h, wd], &[0, 1], &f64t())?;
    let mut block = vec![0.0f64; h * wd];
    w.sendrecv_typed(
        (&src, 1, &interior),
        east.0,
        33,
        (&mut block, h * wd, &f64t()),
        west.1,
        33,
    )?;
    let block_want: Vec<f64> = if me == 0 {
        vec![0.0; h * wd]
    } else {
        (0..h * wd)
            .map(|k| val(me - 1, k / wd, 1 + k % wd))
            .collect()
    };
    c.check("interior subarray", &block, &block_want);
    let boxed: Vec<f64> = (0..60).map(|k| val(me, k / 20, k % 20)).collect();
    let west_face = Datatype::subarray(&[3, 4, 5], &[1, 4, 5], &[0, 0, 0], &f64t())?;
    let east_face = Datatype::subarray(&[3, 4, 5], &[1, 4, 5], &[2, 0, 0], &f64t())?;
    let mut other = vec![0.0f64; 60];
    w.sendrecv_typed(
        (&boxed, 1, &west_face),
        east.0,
        34,
        (&mut other, 1, &east_face),
        west.1,
        34,
    )?;
    let face_want: Vec<f64> = (0..60)
        .map(|k| match (k >= 40, me) {
            (true, m) if m > 0 => val(m - 1, 0, k - 40),
            _ => 0.0,
        })
        .collect();
    c.check("3-D face subarray", &other, &face_want);
    c.ok(
        "halo exchange keeps the interior",
        interior_kept,
        "interior written",
    );
    Ok(())
}

fn edges(c: &mut Checker) -> rmca::Result<()> {
    let w = c.world.clone();
    let (n, me) = (w.size(), w.rank());
    let (to, from) = ((me + 1) % n, (me + n - 1) % n);
    let a = matrix(me, R, C);
    let (col, col1) = column(R, C);
    // A layout reaching past the buffer is refused before anything is sent.
    let e = w.send_typed(&a[C * 2..], 1, &col, to, 40);
    c.ok(
        "out-of-bounds send refused",
        matches!(&e, Err(Error::Datatype(m)) if m.to_string().contains("outside the buffer")),
        format!("{e:?}"),
    );
    // Bad ranks are refused on the packing paths too, and nothing stays lent.
    let mut sink = vec![0.0f64; R * C];
    let bad = scope(|s| {
        let r1 = w.isend_typed(s, &a, 1, &col, n, 40).map(|_| ());
        let r2 = w.send_typed(&a, 1, &col, -2i32, 40);
        let r3 = w.irecv_typed(s, &mut sink, 1, &col, n, 40).map(|_| ());
        (r1, r2, r3)
    });
    c.ok(
        "typed calls refuse bad ranks",
        matches!(
            &bad,
            (
                Err(Error::BadRank { .. }),
                Err(Error::NegativeRank(-2)),
                Err(Error::BadRank { .. })
            )
        ),
        format!("{bad:?}"),
    );
    // A receive layout naming a byte twice is refused.
    let twice = Datatype::hindexed(&[2, 2], &[0, 8], &f64t())?;
    let mut sink = [0.0f64; 4];
    let e = w.recv_typed(&mut sink, 1, &twice, from, 40);
    c.ok(
        "overlapping receive refused",
        matches!(&e, Err(Error::Datatype(m)) if m.to_string().contains("more than once")),
        format!("{e:?}"),
    );
    // Truncation: R values into a type of R - 2: the first R - 2 land, then the error.
    let short_col = Datatype::vector(R - 2, 1, C as isize, &f64t())?;
    let mut b = vec![0.0f64; R * C];
    let st = scope(|s| {
        let r = w.irecv_typed(s, &mut b, 1, &short_col, from, 41)?;
        w.send_typed(&a, 1, &col, to, 41)?;
        r.wait()
    });
    c.ok(
        "truncated typed receive",
        matches!(
            &st,
            Err(Error::Status {
                error: StatusError::Truncated { .. },
                ..
            })
        ),
        format!("{st:?}"),
    );
    let got: Vec<f64> = (0..R - 2).map(|i| b[i * C]).collect();
    let want: Vec<f64> = (0..R - 2).map(|i| val(from, i, 0)).collect();
    c.check("truncated receive keeps the first instances", &got, &want);
    // A shorter message fills the first instances; the status says how many.
    let mut b = vec![0.0f64; R * C];
    let st = scope(|s| {
        let r = w.irecv_typed(s, &mut b, 3, &col1, from, 42)?;
        w.send_typed(&a, 1, &col, to, 42)?;
        r.wait()
    })?;
    c.ok(
        "short message counted",
        col1.instances(st.bytes) == Some(1),
        format!("{} bytes", st.bytes),
    );
    let got: Vec<f64> = (0..R).map(|i| b[i * C]).collect();
    let want: Vec<f64> = (0..R).map(|i| val(from, i, 0)).collect();
    c.check("short message fills the first column", &got, &want);
    c.ok(
        "short message leaves the rest",
        (0..R * C).all(|k| k % C == 0 || b[k] == 0.0),
        "other columns written",
    );
    Ok(())
}

/// Non-blocking typed requests: a receive through a scratch buffer is unpacked by a
/// successful `test` and by a drop; a forgotten one is waited for by its scope and unpacked
/// nowhere; PROC_NULL completes at once.
fn requests(c: &mut Checker) -> rmca::Result<()> {
    let w = c.world.clone();
    let (n, me) = (w.size(), w.rank());
    let (to, from) = ((me + 1) % n, (me + n - 1) % n);
    let a = matrix(me, R, C);
    let (col, _) = column(R, C);
    let want: Vec<f64> = (0..R).map(|i| val(from, i, 0)).collect();
    let column0 = |b: &[f64]| -> Vec<f64> { (0..R).map(|i| b[i * C]).collect() };

    let mut b = vec![0.0f64; R * C];
    let st = scope(|s| {
        let mut r = w.irecv_typed(s, &mut b, 1, &col, from, 70)?;
        w.isend_typed(s, &a, 1, &col, to, 70)?.wait()?;
        loop {
            if let Some(st) = r.test() {
                break st;
            }
        }
    })?;
    c.check("unpacked by test", &column0(&b), &want);
    c.ok("test status", st.bytes == R * 8, format!("{st:?}"));

    // Several at once, completed together: column j into every other element of its
    // own array.
    let every = Datatype::vector(R, 1, 2, &f64t())?;
    let mut bufs = vec![vec![-1.0f64; 2 * R]; C];
    let sts = scope(|s| {
        let mut reqs = Vec::new();
        for (j, buf) in bufs.iter_mut().enumerate() {
            reqs.push(w.irecv_typed(s, buf, 1, &every, from, 74 + j as i32)?);
        }
        for j in 0..C {
            reqs.push(w.isend_typed(s, &a[j..], 1, &col, to, 74 + j as i32)?);
        }
        rmca::TypedRequest::wait_all(reqs)
    })?;
    let got: Vec<f64> = (0..R * C).map(|k| bufs[k % C][2 * (k / C)]).collect();
    c.check("wait_all of typed requests", &got, &matrix(from, R, C));
    let statuses_ok = sts.len() == 2 * C
        && sts.iter().enumerate().all(|(i, st)| {
            let peer = if i < C { from } else { to };
            (st.source, st.tag, st.bytes) == (peer, 74 + (i % C) as i32, R * 8)
        });
    c.ok(
        "wait_all statuses in order",
        statuses_ok,
        format!("{sts:?}"),
    );

    let mut b = vec![0.0f64; R * C];
    scope(|s| {
        let r = w.irecv_typed(s, &mut b, 1, &col, from, 71)?;
        w.send_typed(&a, 1, &col, to, 71)?;
        drop(r);
        Ok::<_, Error>(())
    })?;
    c.check("unpacked by drop", &column0(&b), &want);

    let mut b = vec![0.0f64; R * C];
    scope(|s| {
        std::mem::forget(w.irecv_typed(s, &mut b, 1, &col, from, 72)?);
        w.send_typed(&a, 1, &col, to, 72)
    })?;
    c.ok(
        "forgotten receive completes, unpacked nowhere",
        b.iter().all(|&x| x == 0.0),
        "buffer written",
    );

    let mut b = vec![0.0f64; R * C];
    let (rs, ss) = scope(|s| {
        let r = w.irecv_typed(s, &mut b, 1, &col, rmca::PROC_NULL, 73)?;
        let t = w.isend_typed(s, &a, 1, &col, rmca::PROC_NULL, 73)?;
        Ok::<_, Error>((r.wait()?, t.wait()?))
    })?;
    c.ok(
        "PROC_NULL typed requests",
        rs.is_proc_null() && ss.is_proc_null() && b.iter().all(|&x| x == 0.0),
        format!("{rs:?} {ss:?}"),
    );
    Ok(())
}

/// Contiguous layouts go to the PML in place; others cost exactly one pack and one unpack.
fn staging(c: &mut Checker) -> rmca::Result<()> {
    let w = c.world.clone();
    let (n, me) = (w.size(), w.rank());
    let (to, from) = ((me + 1) % n, (me + n - 1) % n);
    let a = matrix(me, R, C);
    let row = Datatype::contiguous(C, &f64t())?;
    let (col, _) = column(R, C);
    let before = staged_bytes();
    let mut got = vec![0.0f64; R * C];
    scope(|s| {
        let r = w.irecv_typed(s, &mut got, R, &row, from, 50)?;
        w.send_typed(&a, R, &row, to, 50)?;
        r.wait().map(|_| ())
    })?;
    w.bcast_typed(&mut got, R, &row, 0)?;
    c.ok(
        "contiguous typed calls copy nothing",
        staged_bytes() == before,
        format!("{} bytes staged", staged_bytes() - before),
    );
    let before = staged_bytes();
    let mut b = vec![0.0f64; R * C];
    scope(|s| {
        let r = w.irecv_typed(s, &mut b, 1, &col, from, 51)?;
        w.send_typed(&a, 1, &col, to, 51)?;
        r.wait().map(|_| ())
    })?;
    let staged = staged_bytes() - before;
    c.ok(
        "a strided column is packed once and unpacked once",
        staged == 2 * (R * 8) as u64,
        format!("{staged} bytes staged, expected {}", 2 * R * 8),
    );
    Ok(())
}

fn collectives(c: &mut Checker) -> rmca::Result<()> {
    let w = c.world.clone();
    let (n, me) = (w.size(), w.rank());
    let a = matrix(me, R, C);
    let (col, _) = column(R, C);
    let plain = f64t();
    for root in 0..n {
        let j = root % C;
        // bcast: the root's column j, received contiguously, and into a column elsewhere.
        let want: Vec<f64> = (0..R).map(|i| val(root, i, j)).collect();
        let mut got = vec![0.0f64; R];
        if me == root {
            w.bcast_typed(&mut a.clone()[j..], 1, &col, root)?;
            got.clone_from(&want);
        } else if me % 2 == 0 {
            w.bcast_typed(&mut got, R, &plain, root)?;
        } else {
            let mut b = vec![0.0f64; R * C];
            w.bcast_typed(&mut b[j..], 1, &col, root)?;
            got = (0..R).map(|i| b[i * C + j]).collect();
        }
        c.check(&format!("bcast_typed root {root}"), &got, &want);

        // gather: each rank's column (rank % C) into column r of an R × n matrix.
        let (_, coln1) = column(R, n);
        let mine = me % C;
        let mut g = vec![0.0f64; R * n];
        let recv = (me == root).then_some((&mut g[..], 1, &coln1));
        w.gather_typed(&a[mine..], 1, &col, recv, root)?;
        if me == root {
            let want: Vec<f64> = (0..R * n).map(|k| val(k % n, k / n, (k % n) % C)).collect();
            c.check(&format!("gather_typed root {root}"), &g, &want);
        }

        // scatter: column r of the root's R × n matrix to rank r, received contiguously.
        let s = matrix(root, R, n);
        let mut got = vec![0.0f64; R];
        let send = (me == root).then_some((&s[..], 1, &coln1));
        w.scatter_typed(send, &mut got, R, &plain, root)?;
        let want: Vec<f64> = (0..R).map(|i| val(root, i, me)).collect();
        c.check(&format!("scatter_typed root {root}"), &got, &want);
    }

    // allgather: as gather, at every rank.
    let (_, coln1) = column(R, n);
    let mut g = vec![0.0f64; R * n];
    w.allgather_typed(&a[me % C..], 1, &col, &mut g, 1, &coln1)?;
    let want: Vec<f64> = (0..R * n).map(|k| val(k % n, k / n, (k % n) % C)).collect();
    c.check("allgather_typed", &g, &want);

    // alltoall: column r of my R × n matrix to rank r; rank r's into my column r.
    let mine = matrix(me, R, n);
    let mut t = vec![0.0f64; R * n];
    w.alltoall_typed(&mine, 1, &coln1, &mut t, 1, &coln1)?;
    let want: Vec<f64> = (0..R * n).map(|k| val(k % n, k / n, me)).collect();
    c.check("alltoall_typed", &t, &want);

    // alltoall of particles, struct layout on both sides, 2 per peer.
    let pt = particle_type()?;
    let ps: Vec<Particle> = (0..2 * n).map(|k| particle(me, k)).collect();
    let mut got = vec![Particle::zeroed(); 2 * n];
    w.alltoall_typed(&ps, 2, &pt, &mut got, 2, &pt)?;
    let want: Vec<Particle> = (0..2 * n)
        .map(|k| particle(k / 2, 2 * me + k % 2))
        .collect();
    c.check("alltoall_typed particles", &got, &want);

    // allreduce over one column (Sum), reduce of it to the last rank (Max): only the
    // column's elements of the result are written.
    let mut sum = vec![-1.0f64; R * C];
    w.allreduce_typed(&a[1..], &mut sum[1..], 1, &col, Op::Sum)?;
    let want: Vec<f64> = (0..R * C)
        .map(|k| {
            if k % C == 1 {
                (0..n).map(|r| val(r, k / C, 1)).sum()
            } else {
                -1.0
            }
        })
        .collect();
    c.check("allreduce_typed column", &sum, &want);
    let mut max = vec![-1.0f64; R * C];
    let root = n - 1;
    let recv = (me == root).then_some(&mut max[2..]);
    w.reduce_typed(&a[2..], recv, 1, &col, Op::Max, root)?;
    if me == root {
        let want: Vec<f64> = (0..R * C)
            .map(|k| {
                if k % C == 2 {
                    val(n - 1, k / C, 2)
                } else {
                    -1.0
                }
            })
            .collect();
        c.check("reduce_typed column", &max, &want);
    }
    // A contiguous layout reduces in place, as the plain call does.
    let before = staged_bytes();
    let row = Datatype::contiguous(C, &plain)?;
    let mut all = vec![0.0f64; R * C];
    w.allreduce_typed(&a, &mut all, R, &row, Op::Sum)?;
    let want: Vec<f64> = (0..R * C)
        .map(|k| (0..n).map(|r| val(r, k / C, k % C)).sum())
        .collect();
    c.check("allreduce_typed contiguous", &all, &want);
    c.ok(
        "contiguous allreduce_typed copies nothing",
        staged_bytes() == before,
        format!("{} bytes staged", staged_bytes() - before),
    );
    // A layout cutting through elements is refused.
    let skewed = Datatype::hindexed(&[1], &[4], &Datatype::of::<u32>())?;
    let e = w.allreduce_typed(&a, &mut all, 1, &skewed, Op::Sum);
    c.ok(
        "allreduce_typed refuses split elements",
        matches!(&e, Err(Error::Datatype(m)) if m.to_string().contains("segment offset 4 is not a multiple of the 8-byte element")),
        format!("{e:?}"),
    );

    // Mismatched amounts are refused locally.
    let e = w.allgather_typed(&a, 2, &plain, &mut g, 3, &plain);
    c.ok(
        "allgather_typed signature mismatch refused",
        matches!(&e, Err(Error::Datatype(m)) if m.to_string().contains("must match")),
        format!("{e:?}"),
    );
    Ok(())
}

fn main() {
    let universe = rmca::init().expect("rmca init");
    let world = universe.world();
    let mut c = Checker::new(world.clone());
    type Case = fn(&mut Checker) -> rmca::Result<()>;
    let groups: [(&str, Case); 10] = [
        ("columns", columns),
        ("transpose", |c| transpose(c, R, C, 60)),
        ("transpose large", |c| transpose(c, 1024, 72, 62)),
        ("structs", structs),
        ("indexed", indexed),
        ("halos", halos),
        ("edges", edges),
        ("requests", requests),
        ("staging", staging),
        ("collectives", collectives),
    ];
    for (name, run) in groups {
        if let Err(e) = run(&mut c) {
            c.failures += 1;
            c.cases += 1;
            println!("FAIL {name} (rank {}): {e}", world.rank());
        }
        c.done(name);
    }
    if world.rank() == 0 {
        println!(
            "dtype_check: {} ranks, {} cases, {} failures",
            world.size(),
            c.cases,
            c.reported
        );
    }
    let failed = c.reported > 0;
    drop(universe);
    if failed {
        std::process::exit(1);
    }
}
