use super::*;

fn store(transport: Transport, settings: &[(&str, &str)]) -> ParamStore {
    let mut specs = Vec::new();
    let mut r = ParamRegistrar::new("btl", "xx", &mut specs);
    register_device_params(&mut r, transport);
    register_fault_params(&mut r, transport);
    let named: Vec<(String, &str)> = settings
        .iter()
        .map(|(k, v)| (format!("btl_xx_{k}"), *v))
        .collect();
    let named: Vec<(&str, &str)> = named.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    ParamStore::with_settings(specs, &named).expect("params")
}

#[test]
fn defaults_are_soft_friendly() {
    let p = store(Transport::Ud, &[]);
    let d = DeviceConfig::from_params(&p, "btl_xx").unwrap();
    assert_eq!(d.provider, ProviderChoice::Auto);
    assert_eq!(d.if_addr, None, "auto by default");
    assert_eq!((d.device.as_deref(), d.port, d.gid_index), (None, 1, 0));
    for kind in [ProviderKind::Soft, ProviderKind::Rdma] {
        assert_eq!(
            d.estimate(kind, Transport::Ud),
            Transport::Ud.default_estimate(kind)
        );
    }
    let soft_ud = Transport::Ud.default_estimate(ProviderKind::Soft);
    assert!(
        soft_ud.latency_ns
            < Transport::Rc
                .default_estimate(ProviderKind::Soft)
                .latency_ns
            && Transport::Rc
                .default_estimate(ProviderKind::Rdma)
                .latency_ns
                < soft_ud.latency_ns,
        "soft UD beats soft RC on latency, a real HCA beats both"
    );
    let f = fault_from_params(&p, "btl_xx", Transport::Ud, 0).unwrap();
    assert!(f.is_none());
}

#[test]
fn settings_are_read_back() {
    let p = store(
        Transport::Ud,
        &[
            ("provider", "soft"),
            ("if_addr", "10.1.2.3"),
            ("device", " rxe0 "),
            ("port", "2"),
            ("gid_index", "3"),
            ("latency", "700"),
            ("fault_drop", "0.05"),
            ("fault_corrupt", "0.001"),
            ("fault_delay", "20"),
        ],
    );
    let d = DeviceConfig::from_params(&p, "btl_xx").unwrap();
    assert_eq!(d.provider, ProviderChoice::Soft);
    assert_eq!(d.provider.resolve(), ProviderKind::Soft);
    assert_eq!(d.device.as_deref(), Some("rxe0"));
    assert_eq!((d.port, d.gid_index), (2, 3));
    let e = d.estimate(ProviderKind::Soft, Transport::Ud);
    let base = Transport::Ud.default_estimate(ProviderKind::Soft);
    assert_eq!((e.latency_ns, e.bandwidth_mbps), (700, base.bandwidth_mbps));
    let mut job = JobInfo::single_node(0, 2, "secret");
    let pc = d
        .provider_config(ProviderKind::Soft, SoftConfig::default(), &job)
        .unwrap();
    assert_eq!(Some(pc.soft.bind_addr), d.if_addr);
    assert_eq!(pc.rdma.device.as_deref(), Some("rxe0"));
    assert_eq!(pc.job_secret, job.secret);
    // "auto": loopback on one node; on several, an address of this node that is not loopback.
    let auto = DeviceConfig {
        if_addr: None,
        ..d.clone()
    };
    assert_eq!(
        auto.bind_addr(&job).unwrap(),
        "127.0.0.1".parse::<IpAddr>().unwrap()
    );
    job.node_of = vec![0, 1];
    job.node_names = vec!["a".into(), "b".into()];
    match auto.bind_addr(&job) {
        Ok(a) => assert!(!a.is_loopback(), "{a}"),
        // A host without any non-loopback interface: said, not guessed.
        Err(e) => assert!(e.to_string().contains("if_addr"), "{e}"),
    }
    let f = fault_from_params(&p, "btl_xx", Transport::Ud, 0).unwrap();
    assert_eq!((f.drop, f.corrupt), (0.05, 0.001));
    assert_eq!(f.delay, Duration::from_micros(20));
    assert_eq!(
        f.delay_rate, 1.0,
        "a delay without a rate delays everything"
    );
    let g = fault_from_params(&p, "btl_xx", Transport::Ud, 1).unwrap();
    assert_ne!(f.seed, g.seed, "ranks get different fault patterns");
}

#[test]
fn bad_values_name_the_parameter_and_what_is_valid() {
    let p = store(Transport::Ud, &[("if_addr", "node-a")]);
    let e = DeviceConfig::from_params(&p, "btl_xx")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("btl_xx_if_addr") && e.contains("node-a") && e.contains("IPv4"),
        "{e}"
    );
    for bad in ["1.5", "-0.1", "five percent"] {
        let p = store(Transport::Ud, &[("fault_drop", bad)]);
        let e = fault_from_params(&p, "btl_xx", Transport::Ud, 0)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("btl_xx_fault_drop") && e.contains("from 0 to 1"),
            "{e}"
        );
    }
}

#[test]
fn rc_offers_only_delay_faults() {
    let mut specs = Vec::new();
    register_fault_params(
        &mut ParamRegistrar::new("btl", "xx", &mut specs),
        Transport::Rc,
    );
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "btl_xx_fault_delay_rate",
            "btl_xx_fault_delay",
            "btl_xx_fault_seed"
        ]
    );
    let p = store(Transport::Rc, &[("fault_delay_rate", "0.5")]);
    let f = fault_from_params(&p, "btl_xx", Transport::Rc, 0).unwrap();
    assert_eq!((f.delay_rate, f.drop), (0.5, 0.0));
}

#[test]
fn faults_on_rdma_are_refused_with_the_fix() {
    let f = FaultConfig {
        drop: 0.1,
        ..FaultConfig::default()
    };
    assert!(check_faults_supported(ProviderKind::Soft, &f, "btl_ud").is_ok());
    assert!(check_faults_supported(ProviderKind::Rdma, &FaultConfig::default(), "btl_ud").is_ok());
    let e = check_faults_supported(ProviderKind::Rdma, &f, "btl_ud").unwrap_err();
    assert!(e.contains("btl_ud_provider = soft"), "{e}");
}

#[test]
fn open_errors_name_the_btl_and_reach_the_framework_unchanged() {
    use std::error::Error as _;
    let e = verbs("btl-rc", "create CQ")(rmca_verbs::Error::NoDevice("mlx5_9".into()));
    assert_eq!(
        e.to_string(),
        "btl-rc: create CQ: no verbs device \"mlx5_9\""
    );
    assert!(e.source().is_some_and(|s| s.to_string().contains("mlx5_9")));
    let e = OpenError::Unsupported {
        btl: "btl-ud",
        reason: "btl_ud_mtu too small".into(),
    };
    assert_eq!(e.to_string(), "btl-ud: btl_ud_mtu too small");
    match BtlError::from(e) {
        BtlError::Other(m) => assert_eq!(m, "btl-ud: btl_ud_mtu too small"),
        other => panic!("expected BtlError::Other, got {other:?}"),
    }
    let e = OpenError::from(ConfigError::bad("btl_ud", "mtu", 3, "256 to 4096"));
    assert_eq!(
        e.to_string(),
        "invalid value '3' for MCA parameter 'btl_ud_mtu': expected 256 to 4096"
    );
}
