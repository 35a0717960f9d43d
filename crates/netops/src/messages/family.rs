//! The two address families, as one trait: the message builders, parsers and pod wiring are
//! written once over [`IpFamily`] and used for IPv4 ([`Ipv4Network`]) and IPv6
//! ([`Ipv6Network`]).
//!
//! The family is a type parameter rather than a runtime value so that an IPv4 route cannot get
//! an IPv6 gateway, and so that the IPv4 types (`Route`, `Rule`, ...) keep their concrete
//! shape for the daemon's per-ENI code, which is IPv4 only.

use std::fmt::{Debug, Display};
use std::hash::Hash;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnetwork::{IpNetwork, Ipv4Network, Ipv6Network};
use netlink_packet_route::AddressFamily;
use netlink_packet_route::neighbour::NeighbourAddress;
use netlink_packet_route::route::RouteAddress;

mod sealed {
    pub trait Sealed {}
    impl Sealed for ipnetwork::Ipv4Network {}
    impl Sealed for ipnetwork::Ipv6Network {}
    impl Sealed for std::net::Ipv4Addr {}
    impl Sealed for std::net::Ipv6Addr {}
}

/// An address family, named by its network (prefix) type.
pub trait IpFamily:
    Copy + Eq + Hash + Debug + Display + Send + Sync + 'static + sealed::Sealed
{
    /// The family's address type.
    type Addr: FamilyAddr<Net = Self>;
    /// rtnetlink's family value.
    const FAMILY: AddressFamily;
    /// `IPv4` or `IPv6`, for operation texts (`dump IPv6 routes`).
    const NAME: &'static str;
    /// 32 or 128: the prefix length of one address.
    const HOST_PREFIX: u8;
    /// False for IPv6, whose routing table keeps no scope: the kernel reports every IPv6
    /// route as `scope global` whatever the request said, so routes are built, compared and
    /// modelled with that scope.
    const ROUTE_SCOPES: bool;

    /// `ip/prefix`, `None` for a prefix longer than the address.
    fn new(ip: Self::Addr, prefix: u8) -> Option<Self>;
    /// The address as given (host bits kept).
    fn ip(&self) -> Self::Addr;
    /// The prefix length.
    fn prefix(&self) -> u8;
    /// The network address (host bits cleared).
    fn network(&self) -> Self::Addr;
    /// True when `ip` is inside the prefix.
    fn contains(&self, ip: Self::Addr) -> bool;
    /// As a family-agnostic network.
    fn to_ip_network(self) -> IpNetwork;
    /// The all-zero address.
    fn unspecified() -> Self::Addr;
    /// The address of this family in `ip`, if it is of this family.
    fn from_ip(ip: IpAddr) -> Option<Self::Addr>;
    /// The route attribute form of an address.
    fn route_address(ip: Self::Addr) -> RouteAddress;
    /// An address of this family from a route attribute.
    fn from_route_address(address: &RouteAddress) -> Option<Self::Addr>;
    /// The neighbour attribute form of an address.
    fn neighbour_address(ip: Self::Addr) -> NeighbourAddress;
    /// An address of this family from a neighbour attribute.
    fn from_neighbour_address(address: &NeighbourAddress) -> Option<Self::Addr>;

    /// `<ip>/32` or `<ip>/128`.
    fn host(ip: Self::Addr) -> Self {
        Self::new(ip, Self::HOST_PREFIX).expect("a host prefix is always valid")
    }

    /// `0.0.0.0/0` or `::/0`.
    fn any() -> Self {
        Self::new(Self::unspecified(), 0).expect("prefix 0 is always valid")
    }
}

/// An address type of one family; lets callers pass a bare address (a neighbour, a gateway)
/// and have the family follow from it.
pub trait FamilyAddr:
    Copy + Eq + Ord + Hash + Debug + Display + Into<IpAddr> + Send + Sync + 'static + sealed::Sealed
{
    /// The family's network type.
    type Net: IpFamily<Addr = Self>;
}

impl FamilyAddr for Ipv4Addr {
    type Net = Ipv4Network;
}

impl FamilyAddr for Ipv6Addr {
    type Net = Ipv6Network;
}

impl IpFamily for Ipv4Network {
    type Addr = Ipv4Addr;
    const FAMILY: AddressFamily = AddressFamily::Inet;
    const NAME: &'static str = "IPv4";
    const HOST_PREFIX: u8 = 32;
    const ROUTE_SCOPES: bool = true;

    fn new(ip: Ipv4Addr, prefix: u8) -> Option<Self> {
        Ipv4Network::new(ip, prefix).ok()
    }
    fn ip(&self) -> Ipv4Addr {
        Ipv4Network::ip(*self)
    }
    fn prefix(&self) -> u8 {
        Ipv4Network::prefix(*self)
    }
    fn network(&self) -> Ipv4Addr {
        Ipv4Network::network(self)
    }
    fn contains(&self, ip: Ipv4Addr) -> bool {
        Ipv4Network::contains(self, ip)
    }
    fn to_ip_network(self) -> IpNetwork {
        IpNetwork::V4(self)
    }
    fn unspecified() -> Ipv4Addr {
        Ipv4Addr::UNSPECIFIED
    }
    fn from_ip(ip: IpAddr) -> Option<Ipv4Addr> {
        match ip {
            IpAddr::V4(v4) => Some(v4),
            IpAddr::V6(_) => None,
        }
    }
    fn route_address(ip: Ipv4Addr) -> RouteAddress {
        RouteAddress::Inet(ip)
    }
    fn from_route_address(address: &RouteAddress) -> Option<Ipv4Addr> {
        match address {
            RouteAddress::Inet(ip) => Some(*ip),
            _ => None,
        }
    }
    fn neighbour_address(ip: Ipv4Addr) -> NeighbourAddress {
        NeighbourAddress::Inet(ip)
    }
    fn from_neighbour_address(address: &NeighbourAddress) -> Option<Ipv4Addr> {
        match address {
            NeighbourAddress::Inet(ip) => Some(*ip),
            _ => None,
        }
    }
}

impl IpFamily for Ipv6Network {
    type Addr = Ipv6Addr;
    const FAMILY: AddressFamily = AddressFamily::Inet6;
    const NAME: &'static str = "IPv6";
    const HOST_PREFIX: u8 = 128;
    const ROUTE_SCOPES: bool = false;

    fn new(ip: Ipv6Addr, prefix: u8) -> Option<Self> {
        Ipv6Network::new(ip, prefix).ok()
    }
    fn ip(&self) -> Ipv6Addr {
        Ipv6Network::ip(self)
    }
    fn prefix(&self) -> u8 {
        Ipv6Network::prefix(self)
    }
    fn network(&self) -> Ipv6Addr {
        Ipv6Network::network(self)
    }
    fn contains(&self, ip: Ipv6Addr) -> bool {
        Ipv6Network::contains(self, ip)
    }
    fn to_ip_network(self) -> IpNetwork {
        IpNetwork::V6(self)
    }
    fn unspecified() -> Ipv6Addr {
        Ipv6Addr::UNSPECIFIED
    }
    fn from_ip(ip: IpAddr) -> Option<Ipv6Addr> {
        match ip {
            IpAddr::V6(v6) => Some(v6),
            IpAddr::V4(_) => None,
        }
    }
    fn route_address(ip: Ipv6Addr) -> RouteAddress {
        RouteAddress::Inet6(ip)
    }
    fn from_route_address(address: &RouteAddress) -> Option<Ipv6Addr> {
        match address {
            RouteAddress::Inet6(ip) => Some(*ip),
            _ => None,
        }
    }
    fn neighbour_address(ip: Ipv6Addr) -> NeighbourAddress {
        NeighbourAddress::Inet6(ip)
    }
    fn from_neighbour_address(address: &NeighbourAddress) -> Option<Ipv6Addr> {
        match address {
            NeighbourAddress::Inet6(ip) => Some(*ip),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_and_any_prefixes_per_family() {
        let v4 = Ipv4Network::host(Ipv4Addr::new(10, 0, 0, 5));
        assert_eq!(v4.to_string(), "10.0.0.5/32");
        let v6 = Ipv6Network::host("2001:db8::5".parse().unwrap());
        assert_eq!(v6.to_string(), "2001:db8::5/128");
        assert_eq!(Ipv4Network::any().to_string(), "0.0.0.0/0");
        assert_eq!(Ipv6Network::any().to_string(), "::/0");
        assert!(Ipv6Network::any().contains("fe80::1".parse().unwrap()));
        assert_eq!(
            Ipv6Network::from_ip(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            None,
            "an IPv4 address is not of the IPv6 family"
        );
    }
}
