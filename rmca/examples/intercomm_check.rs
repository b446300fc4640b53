//! Checks intercommunicators and communicators made by a group alone through the Rust API:
//! `intercomm_create` between even and odd ranks, point-to-point addressing the remote group
//! (statuses name remote ranks), `intercomm_merge` orders, dup/split/create on an
//! intercommunicator, its collectives (barrier, bcast, gather, scatter, allgather, alltoall
//! and the leader exchange; non-blocking `inter_i*`, two outstanding), `create_group` on a subset that alone calls it,
//! `intercomm_from_groups`, `split_shared`, and the refusals (`Error::CommKind`). Prints
//! `OK`/`FAIL` lines and exits non-zero on any failure:
//!
//! `rmca-run -n 3 target/release/examples/intercomm_check`

use rmca::coll::Op;
use rmca::{Communicator, Error, InterRoot};

mod common;
use common::Checker;

fn intercomm(c: &mut Checker, world: &Communicator) {
    let (n, me) = (world.size(), world.rank());
    let color = (me % 2) as u32;
    let local = world.split(Some(color), 0).unwrap().unwrap();
    let inter = local
        .intercomm_create(0, world, 1 - color as usize, 7)
        .expect("intercomm_create");
    let nremote = if color == 0 { n / 2 } else { n.div_ceil(2) };
    let remote_world = |r: usize| 2 * r + (1 - color as usize);
    c.ok("is_inter", inter.is_inter() && !local.is_inter(), "");
    c.ok(
        "sizes",
        inter.remote_size() == Some(nremote)
            && inter.local_size() == local.size()
            && inter.size() == nremote
            && inter.rank() == local.rank(),
        format!(
            "remote {:?} local {} size {}",
            inter.remote_size(),
            inter.local_size(),
            inter.size()
        ),
    );
    let rg = inter.remote_group().unwrap();
    c.ok(
        "remote group",
        rg.size() == nremote && rg.rank().is_none() && inter.group().size() == local.size(),
        format!("{rg:?}"),
    );

    // Leaders exchange by point-to-point: the status names the remote rank.
    if local.rank() == 0 {
        let mut got = [0usize];
        let st = inter
            .sendrecv(&[me], 0, 3, &mut got, rmca::ANY_SOURCE, 3)
            .unwrap();
        c.ok(
            "p2p across",
            st.source == 0 && got[0] == remote_world(0),
            format!("{st:?} {got:?}"),
        );
    }

    // Merge: the group passing `false` first.
    for low in [0u32, 1] {
        let merged = inter.intercomm_merge(color != low).unwrap();
        let nfirst = if low == 0 { n.div_ceil(2) } else { n / 2 };
        let want = if color == low {
            local.rank()
        } else {
            nfirst + local.rank()
        };
        c.ok(
            "merge order",
            merged.size() == n && merged.rank() == want && !merged.is_inter(),
            format!("rank {} want {want}", merged.rank()),
        );
        let mut sum = [0usize];
        merged.allreduce(&[me], &mut sum, Op::Sum).unwrap();
        c.ok("merged allreduce", sum[0] == n * (n - 1) / 2, sum[0]);
    }

    // Dup, split, create.
    let dup = inter.dup().unwrap();
    c.ok(
        "dup",
        dup.is_inter() && dup.remote_size() == Some(nremote),
        "",
    );
    c.ok(
        "compare dup",
        inter.compare(&dup) == rmca::Comparison::Congruent
            && inter.compare(&local) == rmca::Comparison::Unequal,
        "",
    );
    let part = inter.split(Some(u32::from(local.rank() == 0)), 0).unwrap();
    if local.rank() == 0 {
        let p = part.expect("leaders' part");
        c.ok("split", p.is_inter() && p.remote_size() == Some(1), "");
    }
    let created = inter.create(&inter.group()).unwrap().expect("create");
    c.ok(
        "create",
        created.is_inter() && created.remote_size() == Some(nremote),
        "",
    );

    // Collectives.
    inter.barrier().unwrap();
    for root_color in [0u32, 1] {
        let mut buf = [0u8; 5];
        let root = if color == root_color {
            if local.rank() == 0 {
                buf = [root_color as u8 + 1; 5];
                InterRoot::Root
            } else {
                InterRoot::Null
            }
        } else {
            InterRoot::Remote(0)
        };
        inter.inter_bcast(&mut buf, root).unwrap();
        if color != root_color {
            c.check("inter_bcast", &buf, &[root_color as u8 + 1; 5]);
        }
    }
    let mine = (me as u32).to_le_bytes();
    let mut all = vec![0u8; 4 * nremote];
    inter.inter_allgather(&mine, &mut all).unwrap();
    let want: Vec<u8> = (0..nremote)
        .flat_map(|r| (remote_world(r) as u32).to_le_bytes())
        .collect();
    c.check("inter_allgather", &all, &want);
    let send: Vec<u8> = (0..nremote).map(|j| (me * 10 + j) as u8).collect();
    let mut recv = vec![0u8; nremote];
    inter.inter_alltoall(&send, &mut recv).unwrap();
    let want: Vec<u8> = (0..nremote)
        .map(|j| (remote_world(j) * 10 + local.rank()) as u8)
        .collect();
    c.check("inter_alltoall", &recv, &want);
    // Gather to the even leader, scatter back from it.
    let root = match (color, local.rank()) {
        (0, 0) => InterRoot::Root,
        (0, _) => InterRoot::Null,
        _ => InterRoot::Remote(0),
    };
    let mut got = vec![0u8; 4 * nremote];
    let gather_into = (root == InterRoot::Root).then_some(&mut got[..]);
    inter.inter_gather(&mine, gather_into, root).unwrap();
    if root == InterRoot::Root {
        let want: Vec<u8> = (0..nremote)
            .flat_map(|r| (remote_world(r) as u32).to_le_bytes())
            .collect();
        c.check("inter_gather", &got, &want);
    }
    let blocks: Vec<u8> = (0..nremote).map(|j| 100 + j as u8).collect();
    let mut one = [0u8];
    let scatter_from = (root == InterRoot::Root).then_some(&blocks[..]);
    inter.inter_scatter(scatter_from, &mut one, root).unwrap();
    if color == 1 {
        c.check("inter_scatter", &one, &[100 + local.rank() as u8]);
    }

    // Refusals.
    c.ok(
        "allreduce refused",
        matches!(
            inter.allreduce(&[1u32], &mut [0u32], Op::Sum),
            Err(Error::CommKind(_))
        ),
        "",
    );
    c.ok(
        "merge of an intra-communicator refused",
        matches!(local.intercomm_merge(false), Err(Error::CommKind(_))),
        "",
    );
    inter.barrier().unwrap();

    // Non-blocking intercommunicator collectives, two outstanding at once: an allreduce
    // (each group gets the other's sum) and a broadcast from the odds' leader.
    let mine = [me as u64, 1];
    let mut sum = [0u64; 2];
    let mut got = [0u32; 3];
    let root = match (color, local.rank()) {
        (1, 0) => InterRoot::Root,
        (1, _) => InterRoot::Null,
        _ => InterRoot::Remote(0),
    };
    if root == InterRoot::Root {
        got = [7, 8, 9];
    }
    rmca::scope(|s| {
        let a = inter.inter_iallreduce(s, &mine, &mut sum, Op::Sum)?;
        let b = inter.inter_ibcast(s, &mut got, root)?;
        rmca::Request::complete_all(vec![b, a])
    })
    .unwrap();
    let want: u64 = (0..nremote).map(|r| remote_world(r) as u64).sum();
    c.check("inter_iallreduce", &sum, &[want, nremote as u64]);
    if color == 0 {
        c.check("inter_ibcast", &got, &[7, 8, 9]);
    }
    let (one, mut all) = ([me], vec![0usize; nremote]);
    rmca::scope(|s| {
        inter
            .inter_iallgather(s, &one, &mut all)?
            .wait()
            .map(|_| ())
    })
    .unwrap();
    let want: Vec<usize> = (0..nremote).map(remote_world).collect();
    c.check("inter_iallgather", &all, &want);
    c.ok(
        "an intra-communicator plan refused on an intercommunicator",
        {
            let (x, mut y) = ([1u32], [0u32]);
            matches!(
                rmca::scope(|s| inter.iallreduce(s, &x, &mut y, Op::Sum)?.wait()),
                Err(Error::CommKind(_))
            )
        },
        "",
    );

    // The same intercommunicator from the two groups alone.
    let wg = world.group();
    let evens: Vec<usize> = (0..n).step_by(2).collect();
    let odds: Vec<usize> = (1..n).step_by(2).collect();
    let (ge, go) = (wg.incl(&evens).unwrap(), wg.incl(&odds).unwrap());
    let (lg, rg) = if color == 0 { (&ge, &go) } else { (&go, &ge) };
    let fg = world
        .intercomm_from_groups(lg, 0, rg, 0, "intercomm_check")
        .unwrap();
    c.ok(
        "from groups",
        fg.is_inter() && fg.remote_size() == Some(nremote) && fg.rank() == local.rank(),
        "",
    );
    if local.rank() == 0 {
        let mut got = [0usize];
        fg.sendrecv(&[me], 0, 0, &mut got, 0, 0).unwrap();
        c.ok("from groups p2p", got[0] == remote_world(0), got[0]);
    }
}

fn groups(c: &mut Checker, world: &Communicator) {
    let (n, me) = (world.size(), world.rank());
    // The even ranks alone make a communicator.
    if me % 2 == 0 {
        let evens: Vec<usize> = (0..n).step_by(2).collect();
        let g = world.group().incl(&evens).unwrap();
        let sub = world.create_group(&g, "evens").unwrap();
        let mut sum = [0usize];
        sub.allreduce(&[me], &mut sum, Op::Sum).unwrap();
        c.ok(
            "create_group",
            sub.size() == n.div_ceil(2)
                && sub.rank() == me / 2
                && sum[0] == evens.iter().sum::<usize>(),
            format!("size {} rank {} sum {}", sub.size(), sub.rank(), sum[0]),
        );
    } else {
        let g = world.group().incl(&[0]).unwrap();
        c.ok(
            "create_group non-member",
            world.create_group(&g, "x").is_err(),
            "",
        );
    }
    let node = world.split_shared(-(me as i32)).unwrap();
    c.ok(
        "split_shared",
        node.size() == n && node.rank() == n - 1 - me,
        format!("size {} rank {}", node.size(), node.rank()),
    );
    world.barrier().unwrap();
}

fn main() {
    let universe = rmca::init().unwrap_or_else(|e| {
        eprintln!("intercomm_check: rmca init failed: {e}");
        std::process::exit(1)
    });
    let world = universe.world();
    let (n, me) = (world.size(), world.rank());
    let mut c = Checker::new(world.clone());
    if n >= 2 {
        intercomm(&mut c, &world);
    }
    groups(&mut c, &world);
    let mut total = [0u32; 2];
    world
        .allreduce(&[c.failures, c.cases], &mut total, Op::Sum)
        .expect("allreduce");
    if me == 0 {
        println!(
            "intercomm_check: {n} ranks, {} cases, {} failures",
            total[1], total[0]
        );
    }
    drop(universe);
    std::process::exit(if total[0] == 0 { 0 } else { 1 });
}
