//! `cni` and `ipam-proto` may depend on no other workspace crate, so each names the default
//! socket; the plugin, which uses both, checks that they agree.

#[test]
fn the_confs_default_socket_is_the_one_ipamd_listens_on() {
    assert_eq!(cni::DEFAULT_IPAMD_SOCKET, ipam_proto::DEFAULT_SOCKET);
}
