//! The `k3rs` binary: parses the command line, sets up logging and dispatches to a
//! subcommand. Exit codes: 0 success, 1 runtime error (`Error: <context chain>`), 2 usage or
//! configuration error.

use std::process::ExitCode;

/// k3rs allocates through mimalloc. musl's malloc takes one global lock and made the API
/// server several times slower under load; glibc's spent a quarter of the server's CPU time
/// in `malloc`/`free` while the scheduler bench bound pods (`perf`), and keeps freed memory
/// in per-thread arenas.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's defaults keep freed memory committed for a while and commit whole arenas up
/// front: the agent idled at 31 MB and held 94 MB with 50 pods (musl's malloc: 16 and 34).
/// Purging at once and committing on demand brought it to 17 and 39 MB in the kubelet bench.
fn tune_allocator() {
    use std::ffi::{c_int, c_long};
    // mimalloc 3's `mi_option_t` numbering (libmimalloc-sys 0.1.49, pinned by Cargo.lock).
    const ARENA_EAGER_COMMIT: c_int = 4;
    const PURGE_DELAY: c_int = 15;
    unsafe extern "C" {
        fn mi_option_set(option: c_int, value: c_long);
    }
    // SAFETY: called first thing in `main`, before any other thread exists (the setter is not
    // thread safe); both options only change when freed memory goes back to the kernel.
    unsafe {
        mi_option_set(ARENA_EAGER_COMMIT, 0);
        mi_option_set(PURGE_DELAY, 0);
    }
}

use clap::{CommandFactory, Parser};
use k3rs::cli::{
    self, Cli, Command, agent, check_config, config, etcd_snapshot, kubectl, logging, server, units,
};

fn main() -> ExitCode {
    tune_allocator();
    // Installed as a `kubectl` symlink (install.sh does that when no kubectl exists):
    // behave as `k3rs kubectl`.
    let mut argv = std::env::args_os();
    if let Some(argv0) = argv.next()
        && std::path::Path::new(&argv0).file_name() == Some(std::ffi::OsStr::new("kubectl"))
    {
        let args: Vec<std::ffi::OsString> = argv.collect();
        return exit_with(kubectl::exec(&args));
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // Prints help/version (exit 0) or the usage error (exit 2).
        Err(e) => e.exit(),
    };
    if cli.version {
        println!("{}", cli::version_string());
        return ExitCode::SUCCESS;
    }
    match cli.command {
        None => {
            // `k3rs` alone: show the help on stderr, as a usage error.
            let _ = Cli::command().write_help(&mut std::io::stderr());
            ExitCode::from(2)
        }
        Some(Command::Server(args)) => {
            let config = match config::load(&args, cli.debug) {
                Ok(config) => config,
                Err(e) => {
                    logging::print_fatal(&e);
                    return ExitCode::from(2);
                }
            };
            if let Err(e) = logging::init(config.debug) {
                logging::print_fatal(&format!("{e:#}"));
                return ExitCode::from(2);
            }
            k3rs::panics::install_hook();
            let result =
                server::prepare(&config).and_then(|prepared| server::run(config, prepared));
            exit_with(result)
        }
        Some(Command::Agent(args)) => {
            let config = match agent::load(&args, cli.debug) {
                Ok(config) => config,
                Err(e) => {
                    logging::print_fatal(&e);
                    return ExitCode::from(2);
                }
            };
            if let Err(e) = logging::init(config.debug) {
                logging::print_fatal(&format!("{e:#}"));
                return ExitCode::from(2);
            }
            k3rs::panics::install_hook();
            exit_with(agent::run(config))
        }
        Some(Command::Kubectl(args)) => exit_with(kubectl::exec(&args.args)),
        Some(Command::EtcdSnapshot(args)) => {
            if let Err(e) = logging::init(cli.debug.unwrap_or(false)) {
                logging::print_fatal(&format!("{e:#}"));
                return ExitCode::from(2);
            }
            exit_with(etcd_snapshot::run(*args))
        }
        Some(Command::SecretsEncrypt(args)) => exit_with(cli::secrets_encrypt::run(args)),
        Some(Command::Token(args)) => exit_with(cli::token::run(args)),
        Some(Command::Certificate(args)) => exit_with(cli::certificate::run(args)),
        Some(Command::CheckConfig) => {
            if check_config::run() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Some(Command::SystemdUnit(args)) => {
            print!(
                "{}",
                units::render(&args.kind, &args.bin_dir, args.name.as_deref(), &args.args)
            );
            ExitCode::SUCCESS
        }
    }
}

fn exit_with(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            logging::print_fatal(&format!("{e:#}"));
            ExitCode::FAILURE
        }
    }
}
