//! Many threads through one `&Log`, and one writer per directory.

use std::process::Command;
use std::sync::Arc;
use std::thread;

use payonce_log::{FsStorage, Log, LogConfig, LogError};

use crate::support::{Env, Kind, on_both, open_collect, small_config};

#[test]
fn the_writer_is_send_and_sync() {
    // Guards against the ledger being unable to share the log across threads.
    fn shareable<T: Send + Sync>() {}
    shareable::<Log>();
    shareable::<payonce_log::LogReader>();
}

#[test]
fn sixteen_threads_appending_and_waiting_get_unique_contiguous_seqs_all_present_after_reopening() {
    // Guards against lost, duplicated or misattributed records under concurrent group commit.
    on_both(|env| {
        let config = LogConfig {
            segment_len_max: 4096,
            ..small_config()
        };
        let (log, _) = Log::open(env.storage.clone(), config.clone()).unwrap();
        let per_thread = 100;
        let mut written: Vec<(u64, Vec<u8>)> = thread::scope(|scope| {
            let handles: Vec<_> = (0..16u8)
                .map(|thread| {
                    let log = &log;
                    scope.spawn(move || {
                        (0..per_thread)
                            .map(|i| {
                                let payload = vec![thread, i as u8, (i >> 8) as u8];
                                let seq = log.append(&payload).unwrap();
                                log.wait_durable(seq).unwrap();
                                assert!(log.durable_seq() >= seq);
                                (seq, payload)
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|handle| handle.join().unwrap())
                .collect()
        });
        written.sort();
        let total = 16 * per_thread as u64;
        let seqs: Vec<u64> = written.iter().map(|(seq, _)| *seq).collect();
        assert_eq!(
            seqs,
            (1..=total).collect::<Vec<_>>(),
            "unique and contiguous"
        );
        let stats = log.stats();
        assert_eq!(stats.durable_seq, total);
        eprintln!("{total} records in {} flushes", stats.flushes);
        drop(log);
        let (_, _, seen) = open_collect(&env.storage, &config).unwrap();
        let found: Vec<(u64, Vec<u8>)> = seen
            .into_iter()
            .map(|record| (record.seq, record.payload))
            .collect();
        assert_eq!(found, written);
    });
}

#[test]
fn a_second_writer_in_the_same_process_is_locked_out() {
    // Guards against two writers interleaving records in one directory.
    on_both(|env| {
        let (log, _) = Log::open(env.storage.clone(), small_config()).unwrap();
        let error = Log::open(env.storage.clone(), small_config()).unwrap_err();
        assert!(matches!(&error, LogError::Locked { dir } if *dir == env.describe("")));
        assert!(
            error.to_string().contains("locked by another writer"),
            "{error}"
        );
        drop(log);
        Log::open(env.storage.clone(), small_config()).unwrap();
    });
}

#[test]
fn a_second_writer_through_another_handle_on_the_same_directory_is_locked_out() {
    // Guards against the lock living in the handle rather than on the directory.
    let env = Env::new(Kind::Fs);
    let crate::support::Disk::Fs(path) = &env.disk else {
        unreachable!()
    };
    let (_log, _) = Log::open(Arc::new(FsStorage::new(path)), small_config()).unwrap();
    let error = Log::open(Arc::new(FsStorage::new(path)), small_config()).unwrap_err();
    assert!(matches!(error, LogError::Locked { .. }), "{error:?}");
}

const CHILD_DIR: &str = "PAYONCE_LOG_LOCK_TEST_DIR";

#[test]
fn a_writer_in_another_process_is_locked_out() {
    // Guards against the lock only working within one process.
    if let Ok(dir) = std::env::var(CHILD_DIR) {
        // The child: the parent holds the lock on `dir`.
        let error = Log::open(Arc::new(FsStorage::new(dir)), small_config()).unwrap_err();
        assert!(matches!(error, LogError::Locked { .. }), "{error:?}");
        return;
    }
    let env = Env::new(Kind::Fs);
    let crate::support::Disk::Fs(path) = &env.disk else {
        unreachable!()
    };
    let (log, _) = Log::open(Arc::new(FsStorage::new(path)), small_config()).unwrap();
    let status = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "concurrency::a_writer_in_another_process_is_locked_out",
            "--test-threads=1",
        ])
        .env(CHILD_DIR, path)
        .status()
        .unwrap();
    assert!(status.success(), "the child process was not locked out");
    drop(log);
}
