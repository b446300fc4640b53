//! Named rmca configurations (`--conf`): sets of MCA parameters measured side by side in one
//! invocation, with presets for the PML/BTL combinations and btl-rc's receive-queue modes.
//!
//! Spec grammar, `NAME[=ITEM,ITEM...]` where an ITEM is either `key=value` or the name of a
//! preset whose parameters are included at that point (later items override earlier ones):
//!
//! * `--conf dr+ud`                                   a preset alone
//! * `--conf wqe5=ob1+rc,btl_rc_send_wqes=5`          a preset plus a parameter
//! * `--conf srq=ob1+rc,btl_rc_receive_queues=S+256+64`   `+` inside a value stands for `,`
//! * `--conf 'srq=ob1+rc;btl_rc_receive_queues=S,256,64'` with `;` between items, values are
//!   taken literally (commas included)
//!
//! A `+` in a value is turned into `,` because no rmca parameter value needs a literal `+`
//! while several (btl lists, receive_queues) need commas.

/// MCA parameters of a preset: (name, value), values literal.
pub type Params = &'static [(&'static str, &'static str)];

/// The presets: name, what it is, and its parameters.
pub const PRESETS: &[(&str, &str, Params)] = &[
    (
        "ob1+shm",
        "pml ob1 over shared memory",
        &[("pml", "ob1"), ("btl", "shm,self")],
    ),
    (
        "ob1+rc",
        "pml ob1 over reliable connections (verbs RC)",
        &[("pml", "ob1"), ("btl", "rc,self")],
    ),
    (
        "ob1+ud",
        "pml ob1 over unreliable datagrams (no recovery: a lost datagram hangs the job)",
        &[
            ("pml", "ob1"),
            ("btl", "ud,self"),
            ("pml_ob1_unreliable_btls", "1"),
        ],
    ),
    (
        "dr+ud",
        "pml dr (VFRAG acks, retransmission, checksums) over UD: guaranteed delivery over UD",
        &[("pml", "dr"), ("btl", "ud,self")],
    ),
    (
        "dr+rc",
        "pml dr over RC",
        &[("pml", "dr"), ("btl", "rc,self")],
    ),
    (
        "dr+shm",
        "pml dr over shared memory",
        &[("pml", "dr"), ("btl", "shm,self")],
    ),
    (
        "rc",
        "ob1 over RC, per-peer receive queues (P,32,16), no eager RDMA",
        &[
            ("pml", "ob1"),
            ("btl", "rc,self"),
            ("btl_rc_receive_queues", "P,32,16"),
            ("btl_rc_eager_rdma_max_peers", "0"),
        ],
    ),
    (
        "rc+srq",
        "ob1 over RC, one shared receive queue (S,256,64), no eager RDMA",
        &[
            ("pml", "ob1"),
            ("btl", "rc,self"),
            ("btl_rc_receive_queues", "S,256,64"),
            ("btl_rc_eager_rdma_max_peers", "0"),
        ],
    ),
    (
        "rc+srq+erdma",
        "rc+srq plus an eager RDMA ring for every peer after its first message (threshold 1)",
        &[
            ("pml", "ob1"),
            ("btl", "rc,self"),
            ("btl_rc_receive_queues", "S,256,64"),
            ("btl_rc_eager_rdma_threshold", "1"),
            ("btl_rc_eager_rdma_max_peers", "1024"),
        ],
    ),
    (
        "ud",
        "dr over UD (as dr+ud, named to sit next to rc and rc+srq in the scaling tables)",
        &[("pml", "dr"), ("btl", "ud,self")],
    ),
];

/// A measured rmca configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conf {
    /// Name in tables and JSON.
    pub name: String,
    /// MCA parameters, in order (duplicates resolved: the last one wins).
    pub mca: Vec<(String, String)>,
}

fn preset(name: &str) -> Option<Params> {
    PRESETS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, _, p)| *p)
}

fn preset_names() -> String {
    PRESETS
        .iter()
        .map(|(n, _, _)| *n)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Set `k` to `v`, replacing an earlier setting of `k`.
fn set(mca: &mut Vec<(String, String)>, k: &str, v: &str) {
    mca.retain(|(ek, _)| ek != k);
    mca.push((k.to_owned(), v.to_owned()));
}

/// Parse one `--conf` spec (see the module documentation).
pub fn parse(spec: &str) -> Result<Conf, String> {
    let spec = spec.trim();
    let (name, items) = match spec.split_once('=') {
        Some((n, rest)) => (n.trim(), Some(rest)),
        None => (spec, None),
    };
    if name.is_empty() || name.contains(char::is_whitespace) {
        return Err(format!(
            "--conf '{spec}': the name must be non-empty without spaces (NAME[=ITEM,...])"
        ));
    }
    let mut mca = Vec::new();
    let Some(items) = items else {
        let p = preset(name).ok_or_else(|| {
            format!(
                "--conf '{name}': not a preset (valid: {}); give parameters with NAME=key=value,...",
                preset_names()
            )
        })?;
        for (k, v) in p {
            set(&mut mca, k, v);
        }
        return Ok(Conf {
            name: name.to_owned(),
            mca,
        });
    };
    // With ';' the items are separated by it and values are literal; otherwise by ',' with '+'
    // standing for ',' inside values.
    let literal = items.contains(';');
    let sep = if literal { ';' } else { ',' };
    for item in items.split(sep).map(str::trim).filter(|i| !i.is_empty()) {
        match item.split_once('=') {
            Some((k, v)) => {
                let k = k.trim();
                if k.is_empty() || k.contains(char::is_whitespace) {
                    return Err(format!("--conf '{spec}': bad parameter name in '{item}'"));
                }
                let v = if literal {
                    v.trim().to_owned()
                } else {
                    v.trim().replace('+', ",")
                };
                set(&mut mca, k, &v);
            }
            None => {
                let p = preset(item).ok_or_else(|| {
                    format!(
                        "--conf '{spec}': '{item}' is neither key=value nor a preset (valid presets: {})",
                        preset_names()
                    )
                })?;
                for (k, v) in p {
                    set(&mut mca, k, v);
                }
            }
        }
    }
    if mca.is_empty() {
        return Err(format!("--conf '{spec}': no parameters"));
    }
    Ok(Conf {
        name: name.to_owned(),
        mca,
    })
}

/// The preset list for `--help`.
pub fn describe_presets() -> String {
    PRESETS
        .iter()
        .map(|(n, d, p)| {
            let kv: Vec<String> = p.iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!("  {n:<14} {d}\n  {:<14} ({})", "", kv.join(" "))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(c: &Conf) -> Vec<(&str, &str)> {
        c.mca
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }

    #[test]
    fn a_preset_alone() {
        let c = parse("ob1+ud").unwrap();
        assert_eq!(c.name, "ob1+ud");
        assert_eq!(
            kv(&c),
            vec![
                ("pml", "ob1"),
                ("btl", "ud,self"),
                ("pml_ob1_unreliable_btls", "1")
            ]
        );
    }

    #[test]
    fn preset_plus_parameters_with_plus_as_comma() {
        let c = parse("wqe5=ob1+rc,btl_rc_send_wqes=5,btl_rc_receive_queues=S+256+64").unwrap();
        assert_eq!(c.name, "wqe5");
        assert_eq!(
            kv(&c),
            vec![
                ("pml", "ob1"),
                ("btl", "rc,self"),
                ("btl_rc_send_wqes", "5"),
                ("btl_rc_receive_queues", "S,256,64"),
            ]
        );
    }

    #[test]
    fn semicolons_keep_commas_literal_and_later_items_override() {
        let c = parse("x=pml=ob1;btl=rc,self;pml=dr").unwrap();
        assert_eq!(kv(&c), vec![("btl", "rc,self"), ("pml", "dr")]);
        let c = parse("y=dr+ud,btl=ud+self+shm").unwrap();
        assert_eq!(kv(&c), vec![("pml", "dr"), ("btl", "ud,self,shm")]);
    }

    #[test]
    fn bad_specs_name_what_is_valid() {
        let e = parse("nosuch").unwrap_err();
        assert!(e.contains("ob1+rc") && e.contains("dr+ud"), "{e}");
        let e = parse("a=ob1+rc,bogus").unwrap_err();
        assert!(e.contains("'bogus'") && e.contains("valid presets"), "{e}");
        assert!(parse("=pml=ob1").is_err());
        assert!(parse("a b=pml=ob1").is_err());
        assert!(parse("a=").is_err());
        assert!(parse("a= =1").is_err());
    }

    #[test]
    fn every_preset_parses_and_is_described() {
        for (n, _, p) in PRESETS {
            let c = parse(n).unwrap();
            assert_eq!(c.mca.len(), p.len(), "{n}");
            assert!(describe_presets().contains(n));
        }
    }
}
