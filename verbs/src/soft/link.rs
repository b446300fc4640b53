//! The network interface under a soft context: which one holds the bound address, its MTU, and
//! the largest UD payload one unfragmented datagram carries on it.
//!
//! A HCA's UD MTU is the path MTU: a UD message is one packet. The soft provider keeps that
//! promise by never sending a UDP datagram larger than the interface MTU (IP fragments of a
//! lossy link pile up in the receiver's reassembly memory, which then drops every fragment for
//! `ipfrag_time`), and by setting the DF bit so that a datagram above a smaller path MTU is
//! refused by the local kernel (EMSGSIZE) instead of being fragmented.

use std::ffi::CStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, UdpSocket};
use std::os::fd::AsRawFd;

use crate::error::{Error, Result};

/// IPv4 header without options.
pub const IPV4_HEADER_LEN: u32 = 20;
/// IPv6 fixed header.
pub const IPV6_HEADER_LEN: u32 = 40;
/// UDP header.
pub const UDP_HEADER_LEN: u32 = 8;
/// Smallest UD MTU a context accepts (the smallest InfiniBand MTU).
pub const MIN_UD_MTU: u32 = 256;

/// The interface a soft context's datagrams use, and what it allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SoftLink {
    /// Name of the interface holding the bound address (the loopback interface for a
    /// loopback or unspecified address).
    pub interface: String,
    /// Its MTU: the largest IP packet it sends unfragmented.
    pub if_mtu: u32,
    /// Largest UD payload that fits one packet on it: `if_mtu` minus the IP (20 or 40), UDP
    /// (8) and soft UD (28) headers.
    pub ud_mtu_limit: u32,
}

/// Largest UD payload of one unfragmented datagram on an interface of MTU `if_mtu`.
pub fn ud_payload_limit(if_mtu: u32, ipv6: bool) -> u32 {
    let ip = if ipv6 {
        IPV6_HEADER_LEN
    } else {
        IPV4_HEADER_LEN
    };
    if_mtu.saturating_sub(ip + UDP_HEADER_LEN + super::wire::UD_HEADER_LEN as u32)
}

/// One address of one interface, as `getifaddrs` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct IfAddr {
    name: String,
    addr: Option<IpAddr>,
    up: bool,
    loopback: bool,
}

/// The interface under `addr`, and its MTU.
///
/// - An address held by an interface: that interface.
/// - An unspecified address (`0.0.0.0`, `::`), or a loopback address no interface lists (e.g.
///   `127.0.0.2`): the loopback interface. Peers reach an unspecified address only on this
///   host, so the traffic goes through loopback.
/// - Any other address (bound through `ip_nonlocal_bind` or an AnyIP route): the smallest MTU
///   of the interfaces that are up, the one limit every way out respects.
pub fn link_of(addr: IpAddr) -> Result<SoftLink> {
    let ifs = interfaces()?;
    let pick = choose(&ifs, addr);
    let ipv6 = matches!(addr, IpAddr::V6(v6) if v6.to_ipv4_mapped().is_none());
    let (interface, if_mtu) = match pick {
        Choice::Named(name) => {
            let mtu = interface_mtu(&name)?;
            (name, mtu)
        }
        Choice::SmallestUp(names) => {
            let mut best: Option<(String, u32)> = None;
            for n in names {
                // An interface that vanished meanwhile is simply not a candidate.
                if let Ok(m) = interface_mtu(&n) {
                    if best.as_ref().is_none_or(|b| m < b.1) {
                        best = Some((n, m));
                    }
                }
            }
            let (n, m) = best.ok_or(Error::NoInterface {
                addr,
                reason: "no interface of this host (network namespace) is up",
            })?;
            tracing::warn!(
                %addr,
                interface = %n,
                mtu = m,
                "soft verbs: no interface holds the bound address; the UD MTU follows the smallest MTU of the interfaces that are up"
            );
            (n, m)
        }
    };
    Ok(SoftLink {
        ud_mtu_limit: ud_payload_limit(if_mtu, ipv6),
        interface,
        if_mtu,
    })
}

/// The address other nodes reach this one at, for a soft provider whose job spans nodes: the
/// first IPv4 address of an interface that is up and not loopback (interfaces in name order,
/// so every process of a node picks the same), else the first such global IPv6 address.
pub fn node_address() -> Result<IpAddr> {
    let ifs = interfaces()?;
    pick_node_address(&ifs).ok_or(Error::NoInterface {
        addr: IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        reason: "no interface of this host (network namespace) is up with a non-loopback \
                 address: set the BTL's if_addr to an address the other nodes reach",
    })
}

fn pick_node_address(ifs: &[IfAddr]) -> Option<IpAddr> {
    let mut usable: Vec<(&str, IpAddr)> = ifs
        .iter()
        .filter(|i| i.up && !i.loopback)
        .filter_map(|i| Some((i.name.as_str(), i.addr?)))
        .filter(|(_, a)| match a {
            IpAddr::V4(v4) => !v4.is_loopback() && !v4.is_unspecified() && !v4.is_link_local(),
            // Link-local IPv6 needs a scope id a card does not carry.
            IpAddr::V6(v6) => {
                !v6.is_loopback() && !v6.is_unspecified() && (v6.segments()[0] & 0xffc0) != 0xfe80
            }
        })
        .collect();
    usable.sort_by_key(|(name, a)| (a.is_ipv6(), *name));
    usable.first().map(|(_, a)| *a)
}

#[derive(Debug, PartialEq, Eq)]
enum Choice {
    Named(String),
    SmallestUp(Vec<String>),
}

fn choose(ifs: &[IfAddr], addr: IpAddr) -> Choice {
    let canon = |a: IpAddr| match a {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(a, IpAddr::V4),
        v4 => v4,
    };
    let want = canon(addr);
    if let Some(i) = ifs.iter().find(|i| i.addr.map(canon) == Some(want)) {
        return Choice::Named(i.name.clone());
    }
    let local_only = want.is_unspecified() || want.is_loopback();
    if local_only {
        if let Some(i) = ifs.iter().find(|i| i.loopback) {
            return Choice::Named(i.name.clone());
        }
    }
    let mut up: Vec<String> = ifs
        .iter()
        .filter(|i| i.up)
        .map(|i| i.name.clone())
        .collect();
    up.sort();
    up.dedup();
    Choice::SmallestUp(up)
}

/// Every interface address of this network namespace.
#[allow(unsafe_code)]
fn interfaces() -> Result<Vec<IfAddr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: `head` is a valid out-pointer; on success the list is freed below, once.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(Error::io("getifaddrs", std::io::Error::last_os_error()));
    }
    let mut out = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, alive until freeifaddrs.
        let ifa = unsafe { &*cur };
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: a non-null ifa_addr points to a sockaddr of the family it names, as large
        // as that family's structure.
        let addr = unsafe { sockaddr_ip(ifa.ifa_addr) };
        let flags = ifa.ifa_flags as libc::c_int;
        out.push(IfAddr {
            name,
            addr,
            up: flags & libc::IFF_UP != 0,
            loopback: flags & libc::IFF_LOOPBACK != 0,
        });
        cur = ifa.ifa_next;
    }
    // SAFETY: `head` came from a successful getifaddrs and is freed once; no reference into
    // the list outlives this call (everything above was copied).
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// The IP address of an IPv4 or IPv6 sockaddr, `None` for other families or a null pointer.
///
/// # Safety
/// `sa` is null or points to a sockaddr whose family's structure is readable in full.
#[allow(unsafe_code)]
unsafe fn sockaddr_ip(sa: *const libc::sockaddr) -> Option<IpAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: non-null and readable per the contract; sa_family is the first field.
    match i32::from(unsafe { (*sa).sa_family }) {
        libc::AF_INET => {
            // SAFETY: the family says this is a sockaddr_in.
            let sin = unsafe { &*sa.cast::<libc::sockaddr_in>() };
            Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                sin.sin_addr.s_addr,
            ))))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says this is a sockaddr_in6.
            let sin6 = unsafe { &*sa.cast::<libc::sockaddr_in6>() };
            Some(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)))
        }
        _ => None,
    }
}

/// MTU of the interface `name`, asked of the kernel (SIOCGIFMTU) in this thread's network
/// namespace (`/sys/class/net` may show another one, e.g. under `nsenter --net`).
#[allow(unsafe_code)]
fn interface_mtu(name: &str) -> Result<u32> {
    if name.len() >= libc::IFNAMSIZ || name.as_bytes().contains(&0) {
        return Err(Error::InvalidParam {
            what: "interface name",
            value: name.to_owned(),
            valid: "at most 15 bytes, no NUL",
        });
    }
    let sock = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))
        .map_err(|e| Error::io("socket for SIOCGIFMTU", e))?;
    // SAFETY: ifreq is plain old data; all zeroes is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(name.as_bytes()) {
        *d = *s as libc::c_char;
    }
    // SAFETY: the fd is a live socket; `req` is a valid ifreq with a NUL-terminated name (the
    // array was zeroed and the name is shorter than IFNAMSIZ); the kernel writes ifru_mtu.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFMTU, &mut req) };
    if rc != 0 {
        return Err(Error::io("SIOCGIFMTU", std::io::Error::last_os_error()));
    }
    // SAFETY: SIOCGIFMTU succeeded, so the union holds ifru_mtu.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    Ok(u32::try_from(mtu).unwrap_or(0))
}

/// Sets the DF bit on a UD socket (path-MTU discovery "do"): a datagram larger than the path
/// is refused with EMSGSIZE by the local kernel rather than fragmented. An IPv6 socket gets the
/// IPv4 option too, for the IPv4 traffic of a v4-mapped address.
pub fn set_dont_fragment(sock: &UdpSocket, ipv6_socket: bool) -> Result<()> {
    if ipv6_socket {
        int_sockopt(
            sock,
            libc::IPPROTO_IPV6,
            libc::IPV6_MTU_DISCOVER,
            libc::IPV6_PMTUDISC_DO,
        )
        .map_err(|e| Error::io("setsockopt IPV6_MTU_DISCOVER (DF) on a UD socket", e))?;
    }
    int_sockopt(
        sock,
        libc::IPPROTO_IP,
        libc::IP_MTU_DISCOVER,
        libc::IP_PMTUDISC_DO,
    )
    .map_err(|e| Error::io("setsockopt IP_MTU_DISCOVER (DF) on a UD socket", e))
}

#[allow(unsafe_code)]
pub(super) fn int_sockopt(
    sock: &UdpSocket,
    level: libc::c_int,
    opt: libc::c_int,
    val: libc::c_int,
) -> std::io::Result<()> {
    // SAFETY: the fd is a live socket owned by `sock`; the option value is a c_int read by the
    // kernel for the given length.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            level,
            opt,
            (&val as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ifa(name: &str, addr: Option<&str>, up: bool, loopback: bool) -> IfAddr {
        IfAddr {
            name: name.into(),
            addr: addr.map(|a| a.parse().unwrap()),
            up,
            loopback,
        }
    }

    #[test]
    fn payload_limit_subtracts_ip_udp_and_soft_headers() {
        assert_eq!(ud_payload_limit(1500, false), 1500 - 20 - 8 - 28);
        assert_eq!(ud_payload_limit(1500, true), 1500 - 40 - 8 - 28);
        assert_eq!(ud_payload_limit(65536, false), 65480);
        assert_eq!(ud_payload_limit(40, false), 0, "no underflow");
    }

    #[test]
    fn the_node_address_is_the_first_usable_ipv4_in_interface_order() {
        let ifs = [
            ifa("lo", Some("127.0.0.1"), true, true),
            ifa("veth9", Some("10.1.0.9"), true, false),
            ifa("eth1", Some("fe80::1"), true, false),
            ifa("eth1", Some("2001:db8::7"), true, false),
            ifa("eth0", None, true, false),
            ifa("eth0", Some("169.254.3.3"), true, false),
            ifa("down0", Some("10.9.9.9"), false, false),
            ifa("br0", Some("10.2.0.2"), true, false),
        ];
        // br0 sorts before veth9; link-local, down and loopback addresses never qualify.
        assert_eq!(pick_node_address(&ifs), Some("10.2.0.2".parse().unwrap()));
        // Without IPv4, a global IPv6 address (never a link-local one).
        assert_eq!(
            pick_node_address(&ifs[..4]),
            Some("10.1.0.9".parse().unwrap())
        );
        assert_eq!(
            pick_node_address(&[ifs[0].clone(), ifs[2].clone(), ifs[3].clone()]),
            Some("2001:db8::7".parse().unwrap())
        );
        assert_eq!(pick_node_address(&[ifs[0].clone(), ifs[2].clone()]), None);
    }

    #[test]
    fn the_interface_holding_the_address_is_chosen() {
        let ifs = [
            ifa("lo", Some("127.0.0.1"), true, true),
            ifa("lo", Some("::1"), true, true),
            ifa("eth0", None, true, false),
            ifa("eth0", Some("10.0.0.5"), true, false),
            ifa("eth1", Some("fe80::1"), false, false),
            ifa("ib0", Some("192.168.7.1"), true, false),
        ];
        let c = |a: &str| choose(&ifs, a.parse().unwrap());
        assert_eq!(c("10.0.0.5"), Choice::Named("eth0".into()));
        assert_eq!(c("::ffff:10.0.0.5"), Choice::Named("eth0".into()));
        assert_eq!(c("fe80::1"), Choice::Named("eth1".into()));
        assert_eq!(c("127.0.0.1"), Choice::Named("lo".into()));
        // Loopback and unspecified addresses stay on this host: the loopback interface.
        assert_eq!(c("127.0.0.2"), Choice::Named("lo".into()));
        assert_eq!(c("0.0.0.0"), Choice::Named("lo".into()));
        assert_eq!(c("::"), Choice::Named("lo".into()));
        // Not held by any interface: the smallest MTU of every interface that is up decides.
        assert_eq!(
            c("10.9.9.9"),
            Choice::SmallestUp(vec!["eth0".into(), "ib0".into(), "lo".into()])
        );
    }

    #[test]
    fn loopback_of_this_host_is_found() {
        let l = link_of("127.0.0.1".parse().unwrap()).unwrap();
        assert!(l.if_mtu >= 1280, "{l:?}");
        assert_eq!(l.ud_mtu_limit, ud_payload_limit(l.if_mtu, false));
        assert_eq!(
            link_of("0.0.0.0".parse().unwrap()).unwrap().interface,
            l.interface
        );
    }
}
