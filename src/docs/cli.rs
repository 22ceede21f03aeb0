//! The command-line reference, read from the clap definition of the `sluice` command: every
//! visible command, its description, usage and every flag and argument with its environment
//! variable, default and allowed values.

use super::cell;

/// The page of `cli` and its visible subcommands (depth first, in declaration order).
pub(super) fn page(mut cli: clap::Command) -> String {
    cli.build();
    let mut out = String::from(
        "# Commands and flags\n\nEvery command of the `sluice` binary, as `sluice <command> --help` \
         prints it. Every command also takes `-h` / `--help` (`--help` says more than `-h`) and \
         `-V` / `--version`.\n\n",
    );
    command_sections(&mut cli, "", &mut out);
    out
}

fn command_sections(cmd: &mut clap::Command, parent: &str, out: &mut String) {
    let path = if parent.is_empty() {
        cmd.get_name().to_string()
    } else {
        format!("{parent} {}", cmd.get_name())
    };
    out.push_str(&format!("## `{path}`\n\n"));
    let about = cmd
        .get_long_about()
        .or(cmd.get_about())
        .map(|a| a.to_string())
        .unwrap_or_default();
    if !about.trim().is_empty() {
        out.push_str(&format!("{}\n\n", super::prose(about.trim())));
    }
    let usage = cmd.render_usage().to_string();
    let usage = usage.trim().trim_start_matches("Usage:").trim();
    out.push_str(&format!("```text\n{usage}\n```\n\n"));
    let rows: Vec<String> = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set() && !matches!(a.get_id().as_str(), "help" | "version"))
        .map(argument_row)
        .collect();
    if !rows.is_empty() {
        out.push_str(
            "| flag or argument | environment | default | description |\n|---|---|---|---|\n",
        );
        for row in rows {
            out.push_str(&row);
        }
        out.push('\n');
    }
    let children: Vec<String> = cmd
        .get_subcommands()
        .filter(|c| !c.is_hide_set() && c.get_name() != "help")
        .map(|c| c.get_name().to_string())
        .collect();
    for name in children {
        if let Some(child) = cmd.find_subcommand_mut(&name) {
            command_sections(child, &path, out);
        }
    }
}

/// One flag's or positional argument's row.
fn argument_row(arg: &clap::Arg) -> String {
    let values = arg
        .get_value_names()
        .map(|names| {
            names
                .iter()
                .map(|n| format!("<{n}>"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| format!("<{}>", arg.get_id().as_str().to_uppercase()));
    let takes_value = arg.get_action().takes_values();
    let name = if arg.is_positional() {
        values
    } else {
        let mut names = Vec::new();
        if let Some(short) = arg.get_short() {
            names.push(format!("-{short}"));
        }
        if let Some(long) = arg.get_long() {
            names.push(format!("--{long}"));
        }
        let names = names.join(", ");
        if takes_value {
            format!("{names} {values}")
        } else {
            names
        }
    };
    let env = arg
        .get_env()
        .map(|e| format!("`{}`", e.to_string_lossy()))
        .unwrap_or_default();
    let defaults: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|d| format!("`{}`", d.to_string_lossy()))
        .collect();
    let mut help = arg
        .get_long_help()
        .or(arg.get_help())
        .map(|h| h.to_string())
        .unwrap_or_default();
    let possible: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|p| !p.is_hide_set())
        .map(|p| format!("`{}`", p.get_name()))
        .collect();
    if takes_value && !possible.is_empty() {
        help.push_str(&format!("\n\nOne of {}.", possible.join(", ")));
    }
    format!(
        "| `{}` | {env} | {} | {} |\n",
        name.replace('|', "\\|"),
        defaults.join(", "),
        cell(&help)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_lists_commands_flags_env_and_defaults() {
        let cmd = clap::Command::new("demo")
            .about("A demo.")
            .arg(
                clap::Arg::new("listen")
                    .long("listen")
                    .env("DEMO_LISTEN")
                    .default_value("0.0.0.0:1")
                    .help("where | to listen"),
            )
            .subcommand(clap::Command::new("shown").about("Shown."))
            .subcommand(clap::Command::new("secret").hide(true));
        let page = page(cmd);
        assert!(page.contains("## `demo`"), "{page}");
        assert!(
            page.contains(
                "| `--listen <LISTEN>` | `DEMO_LISTEN` | `0.0.0.0:1` | where \\| to listen |"
            ),
            "{page}"
        );
        assert!(page.contains("## `demo shown`"), "{page}");
        assert!(!page.contains("secret"), "{page}");
    }
}
