//! A network of a test's own: a namespace (`ip netns`) for the database,
//! joined to this process's namespace by a veth pair whose two addresses
//! are a /30 of their own, so the workers, in this process's namespace,
//! reach the database only over that link. Faults are made inside the
//! namespace alone (iptables and nft there), so nothing outside it
//! changes: the link cut both ways, cut once a packet carrying a marker
//! (`COMMIT`, the ledger-wide lock's call) has gone through, packets
//! lost at random. Everything goes with [`Link`]'s drop.
//!
//! Root is needed. Under `CI=true` a test that cannot make its namespace
//! fails; elsewhere it skips, loudly.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use payonce_postgres::cluster::{self, Cluster, Settings};

/// A namespace and the veth pair into it.
pub struct Link {
    /// The namespace's name.
    pub netns: String,
    /// The veth end in this process's namespace.
    outside: String,
    /// The address of the end in this process's namespace.
    pub outside_addr: String,
    /// The address of the end in the namespace, the database's.
    pub inside_addr: String,
    /// Cuts made so far, each its own `recent` list.
    cuts: AtomicU32,
}

/// Runs `args` (a command and its arguments); the error says which
/// failed and how.
fn run(args: &[&str]) -> Result<(), String> {
    let output = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|error| format!("{}: {error}", args.join(" ")))?;
    match output.status.success() {
        true => Ok(()),
        false => Err(format!(
            "{}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        )),
    }
}

impl Link {
    /// A new namespace and veth pair, with names and addresses no other
    /// link of this machine's tests has.
    pub fn make() -> Result<Link, String> {
        static LINKS: AtomicU32 = AtomicU32::new(0);
        let n = LINKS.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let tag = format!("{}{n}", pid % 100_000);
        let (a, b) = (100 + pid % 100, (n % 64) * 4);
        let link = Link {
            netns: format!("payonce{tag}"),
            outside: format!("po{tag}a"),
            outside_addr: format!("10.{a}.{}.{}", pid / 100 % 250, b + 1),
            inside_addr: format!("10.{a}.{}.{}", pid / 100 % 250, b + 2),
            cuts: AtomicU32::new(0),
        };
        run(&["ip", "netns", "add", &link.netns])?;
        // From here on, the drop removes what was made.
        let inside = format!("po{tag}b");
        let outside_cidr = format!("{}/30", link.outside_addr);
        let inside_cidr = format!("{}/30", link.inside_addr);
        let ns = link.netns.as_str();
        let steps: [&[&str]; 7] = [
            &[
                "ip",
                "link",
                "add",
                &link.outside,
                "type",
                "veth",
                "peer",
                "name",
                &inside,
            ],
            &["ip", "link", "set", &inside, "netns", ns],
            &["ip", "addr", "add", &outside_cidr, "dev", &link.outside],
            &["ip", "link", "set", &link.outside, "up"],
            &[
                "ip",
                "netns",
                "exec",
                ns,
                "ip",
                "addr",
                "add",
                &inside_cidr,
                "dev",
                &inside,
            ],
            &[
                "ip", "netns", "exec", ns, "ip", "link", "set", &inside, "up",
            ],
            &["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"],
        ];
        for step in steps {
            run(step)?;
        }
        link.iptables(&["-L"])?;
        Ok(link)
    }

    /// A link, or `None` (having said why) when none can be made outside
    /// CI; under `CI=true` a link that cannot be made fails the test.
    pub fn make_or_skip() -> Option<Link> {
        match Link::make() {
            Ok(link) => Some(link),
            Err(error) if cluster::required() => {
                panic!("CI=true, and no network namespace could be made: {error}")
            }
            Err(error) => {
                cluster::shout(&format!("SKIPPING a network fault test: {error}"));
                None
            }
        }
    }

    /// A cluster whose server runs in the namespace, listening on its end
    /// of the link on TCP (and on a socket, for the test's own setup).
    pub fn cluster(&self) -> Cluster {
        Cluster::start_with(Settings {
            netns: Some(self.netns.clone()),
            listen: Some(self.inside_addr.clone()),
            ..Settings::default()
        })
        .unwrap_or_else(|error| panic!("no cluster in {}: {error}", self.netns))
    }

    fn in_netns(&self, args: &[&str]) -> Result<(), String> {
        let mut words = vec!["ip", "netns", "exec", &self.netns];
        words.extend_from_slice(args);
        run(&words)
    }

    fn iptables(&self, args: &[&str]) -> Result<(), String> {
        let mut words = vec!["iptables", "-w"];
        words.extend_from_slice(args);
        self.in_netns(&words)
    }

    /// Cuts the link both ways: every packet from or to this process's
    /// end is dropped in the namespace.
    pub fn partition(&self) {
        let outside = self.outside_addr.as_str();
        self.iptables(&["-I", "INPUT", "1", "-s", outside, "-j", "DROP"])
            .unwrap();
        self.iptables(&["-I", "OUTPUT", "1", "-d", outside, "-j", "DROP"])
            .unwrap();
    }

    /// Cuts the link once a packet from this process's end carrying
    /// `marker` has reached the namespace: that packet is delivered, and
    /// nothing after it either way. Returns the cut's name, for
    /// [`Link::fired`].
    pub fn cut_after(&self, marker: &str) -> String {
        let name = format!("cut{}", self.cuts.fetch_add(1, Ordering::Relaxed));
        let outside = self.outside_addr.as_str();
        // Checked first: packets after the marker's.
        self.iptables(&[
            "-A", "INPUT", "-s", outside, "-m", "recent", "--rcheck", "--name", &name, "-j", "DROP",
        ])
        .unwrap();
        self.iptables(&[
            "-A", "INPUT", "-s", outside, "-m", "string", "--string", marker, "--algo", "bm", "-m",
            "recent", "--set", "--name", &name,
        ])
        .unwrap();
        self.iptables(&[
            "-A", "OUTPUT", "-d", outside, "-m", "recent", "--rcheck", "--rdest", "--name", &name,
            "-j", "DROP",
        ])
        .unwrap();
        name
    }

    /// Whether the cut `name` ([`Link::cut_after`]) has cut the link.
    pub fn fired(&self, name: &str) -> bool {
        let output = Command::new("ip")
            .args(["netns", "exec", &self.netns, "cat"])
            .arg(format!("/proc/net/xt_recent/{name}"))
            .output()
            .unwrap();
        !output.stdout.is_empty()
    }

    /// Drops `percent` of the packets each way at random, in the
    /// namespace (nft's `numgen`).
    pub fn lose(&self, percent: u32) {
        let below = percent.to_string();
        self.in_netns(&["nft", "add", "table", "inet", "loss"])
            .unwrap();
        for hook in ["input", "output"] {
            let chain = format!("{{ type filter hook {hook} priority 0; }}");
            self.in_netns(&["nft", "add", "chain", "inet", "loss", hook, &chain])
                .unwrap();
            self.in_netns(&[
                "nft", "add", "rule", "inet", "loss", hook, "numgen", "random", "mod", "100", "<",
                &below, "drop",
            ])
            .unwrap();
        }
    }

    /// Heals every cut: the link carries everything again (random loss
    /// stays).
    pub fn heal(&self) {
        self.iptables(&["-F", "INPUT"]).unwrap();
        self.iptables(&["-F", "OUTPUT"]).unwrap();
    }
}

impl Drop for Link {
    /// The namespace goes, and with it the veth pair (its end inside goes,
    /// which takes the other with it) and every rule made in it.
    fn drop(&mut self) {
        let _ = run(&["ip", "netns", "delete", &self.netns]);
        let _ = run(&["ip", "link", "delete", &self.outside]);
    }
}

/// Several namespaces on one bridge, each with an address of its own on
/// one /24, this process's namespace on it too: a network of hosts, for a
/// cluster whose members each run in a namespace of their own. The bridge
/// is in a namespace of its own, so nothing outside changes. A member is
/// cut off from every other (and from this process) by iptables in its
/// own namespace, and healed there.
pub struct Net {
    /// The bridge's namespace.
    hub: String,
    /// The veth end in this process's namespace.
    outside: String,
    /// This process's address on the network.
    pub outside_addr: String,
    /// The members' namespaces and addresses, in order.
    pub members: Vec<payonce_postgres::cluster::patroni::Place>,
}

impl Net {
    /// A network of `count` member namespaces, with names and addresses no
    /// other network or link of this machine's tests has.
    pub fn make(count: usize) -> Result<Net, String> {
        static NETS: AtomicU32 = AtomicU32::new(0);
        let n = NETS.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let tag = format!("{}n{n}", pid % 100_000);
        let prefix = format!("10.{}.{}", 200 + pid % 50, (pid / 50 + n) % 250);
        let mut net = Net {
            hub: format!("pnet{tag}h"),
            outside: format!("pn{tag}o"),
            outside_addr: format!("{prefix}.1"),
            members: Vec::new(),
        };
        run(&["ip", "netns", "add", &net.hub])?;
        net.in_hub(&["ip", "link", "add", "br0", "type", "bridge"])?;
        net.in_hub(&["ip", "link", "set", "br0", "up"])?;
        let outside = net.outside.clone();
        net.plug(
            &outside,
            &format!("pn{tag}O"),
            None,
            &format!("{prefix}.1/24"),
        )?;
        for member in 0..count {
            let netns = format!("pnet{tag}m{member}");
            let addr = format!("{prefix}.{}", 10 + member);
            run(&["ip", "netns", "add", &netns])?;
            net.members.push(payonce_postgres::cluster::patroni::Place {
                netns: netns.clone(),
                addr: addr.clone(),
            });
            let end = format!("pn{tag}m{member}");
            net.plug(
                &end,
                &format!("{end}b"),
                Some(&netns),
                &format!("{addr}/24"),
            )?;
        }
        Ok(net)
    }

    /// A network, or `None` (having said why) when none can be made
    /// outside CI; under `CI=true` one that cannot be made fails the test.
    pub fn make_or_skip(count: usize) -> Option<Net> {
        match Net::make(count) {
            Ok(net) => Some(net),
            Err(error) if cluster::required() => {
                panic!("CI=true, and no network of namespaces could be made: {error}")
            }
            Err(error) => {
                cluster::shout(&format!("SKIPPING a network fault test: {error}"));
                None
            }
        }
    }

    fn in_hub(&self, args: &[&str]) -> Result<(), String> {
        let mut words = vec!["ip", "netns", "exec", &self.hub];
        words.extend_from_slice(args);
        run(&words)
    }

    /// A veth pair: `end` in `netns` (this process's when `None`) with
    /// `cidr`, `peer` on the hub's bridge.
    fn plug(&self, end: &str, peer: &str, netns: Option<&str>, cidr: &str) -> Result<(), String> {
        run(&[
            "ip", "link", "add", end, "type", "veth", "peer", "name", peer,
        ])?;
        run(&["ip", "link", "set", peer, "netns", &self.hub])?;
        self.in_hub(&["ip", "link", "set", peer, "master", "br0"])?;
        self.in_hub(&["ip", "link", "set", peer, "up"])?;
        let mut inside: Vec<&str> = Vec::new();
        if let Some(netns) = netns {
            run(&["ip", "link", "set", end, "netns", netns])?;
            inside = vec!["ip", "netns", "exec", netns];
        }
        let steps: [&[&str]; 3] = [
            &["ip", "addr", "add", cidr, "dev", end],
            &["ip", "link", "set", end, "up"],
            &["ip", "link", "set", "lo", "up"],
        ];
        for step in &steps[..2 + usize::from(netns.is_some())] {
            run(&[inside.as_slice(), step].concat())?;
        }
        Ok(())
    }

    /// Cuts member `n` off: every packet to or from its namespace, but on
    /// its loopback, is dropped there. Its processes run on.
    pub fn cut(&self, n: usize) {
        let netns = self.members[n].netns.as_str();
        for chain in ["INPUT", "OUTPUT"] {
            let way = if chain == "INPUT" { "-i" } else { "-o" };
            run(&[
                "ip", "netns", "exec", netns, "iptables", "-w", "-I", chain, "1", way, "lo", "-j",
                "ACCEPT",
            ])
            .unwrap();
            run(&[
                "ip", "netns", "exec", netns, "iptables", "-w", "-A", chain, "-j", "DROP",
            ])
            .unwrap();
        }
    }

    /// Heals member `n`: its namespace drops nothing again.
    pub fn heal(&self, n: usize) {
        let netns = self.members[n].netns.as_str();
        for chain in ["INPUT", "OUTPUT"] {
            run(&["ip", "netns", "exec", netns, "iptables", "-w", "-F", chain]).unwrap();
        }
    }
}

impl Drop for Net {
    /// The namespaces go, and with them the veth pairs and every rule.
    fn drop(&mut self) {
        for member in &self.members {
            let _ = run(&["ip", "netns", "delete", &member.netns]);
        }
        let _ = run(&["ip", "netns", "delete", &self.hub]);
        let _ = run(&["ip", "link", "delete", &self.outside]);
    }
}
