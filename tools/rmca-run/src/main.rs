//! `rmca-run -n N [options] program [args...]`: start an rmca job.

use rmca_run::cli::{self, CliError};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opts = match cli::parse(&args) {
        Ok(o) => o,
        Err(CliError::Help) => {
            println!("{}", cli::USAGE);
            return;
        }
        Err(e) => {
            eprintln!("rmca-run: {e}");
            std::process::exit(2);
        }
    };
    if std::env::var_os("RUST_LOG").is_some() {
        // Only when asked: the launcher's own diagnostics must not mix into job output.
        tracing_subscriber_init();
    }
    std::process::exit(rmca_run::launch::run(&opts));
}

fn tracing_subscriber_init() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        // Colour codes only for a terminal: logs redirected to a file stay plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}
