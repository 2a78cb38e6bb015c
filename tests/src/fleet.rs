//! Worker processes (`failover_worker`) submitting in rounds against a
//! rail that records every send durably, and what they were told: the
//! load of the failover and partition tests, and the checks each makes
//! after a fault.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, Sender, channel};

use payonce::{Config, Ledger, NewWithdrawal, State};
use payonce_log::Head;
use payonce_model::WithdrawalRequest;

/// One line a worker wrote, and which worker wrote it.
#[derive(Debug, Clone)]
pub struct Said {
    /// The worker's number, from 0.
    pub worker: usize,
    /// The line, without its newline.
    pub line: String,
    /// When it reached this process.
    pub at: std::time::Instant,
}

/// Worker processes of one ledger, and the rail files they write.
pub struct Fleet {
    children: Vec<(Child, ChildStdin)>,
    lines: Receiver<Said>,
    rails: Vec<PathBuf>,
    dir: tempfile::TempDir,
    rounds: usize,
}

/// What the workers were told and did, over every round so far.
#[derive(Debug, Default)]
pub struct Told {
    /// Key and reference of every outcome a client was told.
    pub outcomes: Vec<(String, String)>,
    /// Losers: key, withdrawal, the holder they were told.
    pub lost: Vec<(String, String, String)>,
    /// Refusals of the log as rewound: key and message.
    pub rewound: Vec<(String, String)>,
    /// Every head a worker read.
    pub heads: Vec<Head>,
    /// "Cannot record" answers.
    pub errors: u64,
    /// The slowest of them, in milliseconds.
    pub slowest_error_ms: u64,
}

impl Fleet {
    /// Starts `workers` worker processes of `threads` threads each on the
    /// ledger at `url`, `bin` being the `failover_worker` executable; once
    /// every one has replayed the ledger.
    pub fn start(bin: &Path, url: &str, workers: usize, threads: usize) -> Fleet {
        let dir = tempfile::tempdir().unwrap();
        let (send, lines) = channel();
        let mut children = Vec::new();
        let mut rails = Vec::new();
        for n in 0..workers {
            let rail = dir.path().join(format!("rail-{n}"));
            let mut child = Command::new(bin)
                .args([url, &format!("api-{n}"), &threads.to_string()])
                .arg(&rail)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            let stdin = child.stdin.take().unwrap();
            read_lines(
                n,
                BufReader::new(child.stdout.take().unwrap()),
                send.clone(),
            );
            children.push((child, stdin));
            rails.push(rail);
        }
        let fleet = Fleet {
            children,
            lines,
            rails,
            dir,
            rounds: 0,
        };
        let ready = fleet.wait_for("ready", workers);
        assert_eq!(
            ready.len(),
            0,
            "a worker said something before it was ready"
        );
        fleet
    }

    /// Writes `withdrawals` to a file and has every worker submit them.
    pub fn round(&mut self, withdrawals: &[WithdrawalRequest]) {
        let ids = self.dir.path().join(format!("round-{}", self.rounds));
        self.rounds += 1;
        let mut file = std::fs::File::create(&ids).unwrap();
        for request in withdrawals {
            writeln!(file, "{}", serde_json::to_string(request).unwrap()).unwrap();
        }
        for (_, stdin) in &mut self.children {
            writeln!(stdin, "round {}", ids.display()).unwrap();
            stdin.flush().unwrap();
        }
    }

    /// The lines the workers write until `count` answers to submissions
    /// came (from any worker), then returns them.
    pub fn answers(&self, count: usize) -> Vec<Said> {
        let mut said = Vec::new();
        let mut answers = 0;
        while answers < count {
            let line = self.next();
            if is_answer(&line.line) {
                answers += 1;
            }
            said.push(line);
        }
        said
    }

    /// Every line the workers write until each wrote `word` once more,
    /// `word` itself left out.
    pub fn wait_for(&self, word: &str, workers: usize) -> Vec<Said> {
        let mut said = Vec::new();
        let mut seen = 0;
        while seen < workers {
            let line = self.next();
            if line.line == word {
                seen += 1;
            } else {
                said.push(line);
            }
        }
        said
    }

    /// Every line the workers write until each finished its round.
    pub fn finish_round(&self) -> Vec<Said> {
        self.wait_for("done", self.children.len())
    }

    /// Every line the workers wrote that was not read yet, without
    /// waiting.
    pub fn said_so_far(&self) -> Vec<Said> {
        self.lines.try_iter().collect()
    }

    /// The next line a worker writes.
    pub fn next_line(&self) -> Said {
        self.next()
    }

    fn next(&self) -> Said {
        self.lines
            .recv_timeout(std::time::Duration::from_secs(300))
            .expect("a worker fell silent for 5 minutes, or died")
    }

    /// Every send the rail recorded: the withdrawal, and the key it was
    /// sent under.
    pub fn sends(&self) -> Vec<(String, String)> {
        self.rails
            .iter()
            .filter(|rail| rail.exists())
            .flat_map(|rail| {
                let text = std::fs::read_to_string(rail).unwrap();
                text.lines()
                    .map(|line| {
                        let words: Vec<&str> = line.split(' ').collect();
                        let ["send", id, key] = words.as_slice() else {
                            panic!("the rail recorded {line}");
                        };
                        (id.to_string(), key.to_string())
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Ends every worker: its standard input closed, it exits.
    pub fn stop(mut self) {
        for (mut child, stdin) in std::mem::take(&mut self.children) {
            drop(stdin);
            assert!(child.wait().unwrap().success(), "a worker failed");
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for (child, _) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn is_answer(line: &str) -> bool {
    ["told ", "lost ", "refused ", "rewound ", "gaveup "]
        .iter()
        .any(|word| line.starts_with(word))
}

fn read_lines(worker: usize, output: impl BufRead + Send + 'static, to: Sender<Said>) {
    std::thread::spawn(move || {
        for line in output.lines() {
            let Ok(line) = line else { return };
            let at = std::time::Instant::now();
            if to.send(Said { worker, line, at }).is_err() {
                return;
            }
        }
    });
}

impl Told {
    /// Takes in what the workers said.
    pub fn add(&mut self, said: &[Said]) {
        for Said { line, worker, .. } in said {
            let words: Vec<&str> = line.splitn(4, ' ').collect();
            match words.as_slice() {
                ["told", _, key, reference] => {
                    self.outcomes.push((key.to_string(), reference.to_string()))
                }
                ["lost", id, key, holder] => {
                    self.lost
                        .push((key.to_string(), id.to_string(), holder.to_string()))
                }
                ["refused", ..] => {}
                ["rewound", _, key, message] => {
                    self.rewound.push((key.to_string(), message.to_string()))
                }
                ["head", head] => self.heads.push(head.parse().unwrap()),
                ["errors", count, slowest] => {
                    self.errors += count.parse::<u64>().unwrap();
                    self.slowest_error_ms = self.slowest_error_ms.max(slowest.parse().unwrap());
                }
                _ => panic!("worker {worker} said {line}"),
            }
        }
    }
}

/// What every check after a fault counted.
#[derive(Debug, Default, Clone, Copy)]
pub struct Checked {
    /// Sends the rail recorded, each found claimed by its key.
    pub sends: usize,
    /// Outcomes clients were told, each found recorded.
    pub outcomes: usize,
    /// Losers, each told the key that holds the withdrawal.
    pub losers: usize,
    /// Heads read, each one the log passes through.
    pub heads: usize,
}

/// The checks after a fault, on the ledger the database holds now
/// (`state`, its head `head`, through which every head in `heads_read`
/// must pass as `through` says): no withdrawal sent twice; every claim
/// whose send ran there, under the key it was sent for; every outcome a
/// client was told there; every loser told the key that holds it.
pub fn check(
    state: &State,
    sends: &[(String, String)],
    told: &Told,
    heads_read: &[Head],
    through: impl Fn(u64) -> Option<Head>,
) -> Checked {
    let mut sent: HashMap<&str, &str> = HashMap::new();
    for (id, key) in sends {
        let before = sent.insert(id, key);
        assert!(
            before.is_none(),
            "{id} sent twice: for {before:?} and {key}"
        );
        let holder = state.claimed_by(id).map(|key| key.as_str().to_owned());
        assert_eq!(
            holder.as_deref(),
            Some(key.as_str()),
            "{id}'s claim is gone"
        );
    }
    for (key, reference) in &told.outcomes {
        let outcome = state
            .outcome(key)
            .unwrap_or_else(|| panic!("{key}'s outcome, which a client was told, is gone"));
        assert_eq!(outcome.reference().unwrap().as_str(), reference, "{key}");
    }
    for (key, id, holder) in &told.lost {
        let now = state.claimed_by(id).map(|key| key.as_str().to_owned());
        assert_eq!(now.as_deref(), Some(holder.as_str()), "{key} lost {id}");
    }
    for head in heads_read {
        assert_eq!(
            through(head.seq),
            Some(*head),
            "the log went back past {head}"
        );
    }
    Checked {
        sends: sends.len(),
        outcomes: told.outcomes.len(),
        losers: told.lost.len(),
        heads: heads_read.len(),
    }
}

/// `count` new withdrawals created through `ledger`, retried while it
/// cannot record.
pub fn create(ledger: &Ledger, count: usize, round: usize) -> Vec<WithdrawalRequest> {
    (0..count)
        .map(|n| {
            let new = || NewWithdrawal {
                amount: format!("{}.{n:02}", round + 1).parse().unwrap(),
                currency: "USDC".parse().unwrap(),
                destination: format!("0xdest{round}x{n}").parse().unwrap(),
                requested_by: "alice".parse().unwrap(),
            };
            let started = std::time::Instant::now();
            loop {
                match ledger.create(new()) {
                    Ok(request) => break request,
                    Err(error) => {
                        assert!(
                            started.elapsed() < std::time::Duration::from_secs(60),
                            "{error}"
                        );
                        std::thread::sleep(std::time::Duration::from_millis(20));
                    }
                }
            }
        })
        .collect()
}

/// A ledger at `url` for the test's own writes (creating withdrawals), as
/// worker `name`.
pub fn driver(url: &str, name: &str) -> Ledger {
    payonce_postgres::open(url, name, Config::default()).unwrap()
}
