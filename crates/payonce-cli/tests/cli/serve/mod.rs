//! `payonce serve` as a process: its startup refusals, SIGTERM while a
//! send runs, a load with SIGKILLs, HTTPS and SIGHUP, signals at awkward
//! moments, the HTTP rail's URL and proxies, and what it says of secrets.
//! The service's routes are tested in payonce-server, in one process.

mod clients;
mod kill;
mod kill_postgres;
mod memory;
mod rail;
mod secrets;
mod served;
mod shutdown;
mod signals;
mod startup;
mod tls;

pub const ALICE: &str = "alice-token-0123456789";
pub const BOB: &str = "bob-token-0123456789";

pub const TOKENS: &str = "[clients]\nalice = \"alice-token-0123456789\"\nbob = \"bob-token-0123456789\"\n\
                          [operators]\nfrank = \"frank-token-0123456789\"\n";
