//! Kafka 0.7.2's tools read their command lines with jopt-simple, which accepts spellings clap
//! does not: a long option abbreviated to any unique prefix (`--zk` for `--zookeeper`), a long
//! option after a single dash (`-topic t`), and a value that starts with a dash after an option
//! that requires one (`--max-messages -1`). [`as_jopt_reads`] rewrites such a command line into
//! the full spelling clap reads, so operators' scripts keep working; everything else is left for
//! clap to accept or refuse.
//!
//! The rules, as jopt-simple 3.2 (0.7.2's parser) has them:
//! - an exact option name always wins; otherwise a prefix names the one option it starts, and a
//!   prefix several options start is refused, naming them ([`JoptError::Ambiguous`]);
//! - `-word` is read as the long option `word` when `word` names one (exactly or as a unique
//!   prefix), refused when it starts several, and otherwise left as it was (clap's one-letter
//!   options, `-v`, `-h`, are never looked up);
//! - `--option=value` and `-option=value` carry their value;
//! - the word after an option that requires a value is that value, whatever it starts with;
//! - after `--`, nothing is rewritten.
//!
//! Not rewritten: `server` (0.7.2's `kafka.Kafka` takes files, not options),
//! `update-offsets-in-zk` (three positional words), `jmx-tool` (takes anything) and `dump-log`,
//! whose only single-dash word, `-noprint` in any case, is read as `--noprint`.

use std::ffi::OsString;

use clap::CommandFactory;

use crate::command::Cli;

/// Options Tributary added to 0.7.2's tools (TLS to brokers and ZooKeeper): matched only by
/// their exact names, never as a prefix, so that no 0.7.2 abbreviation (`--zk` for
/// `--zkconnect`, `--s` for `--server`) becomes ambiguous because of them.
const EXACT_ONLY: [&str; 6] = [
    "zk-tls-config-file",
    "security.protocol",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.endpoint.identification.algorithm",
];

/// Subcommands whose 0.7.2 counterpart does not parse options with jopt-simple.
const NOT_JOPT: [&str; 3] = ["server", "update-offsets-in-zk", "jmx-tool"];

/// A command line jopt-simple would have refused too.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JoptError {
    /// An abbreviation several options start with.
    #[error("{given} is ambiguous: it could be {}", .candidates.iter().map(|c| format!("--{c}")).collect::<Vec<_>>().join(", "))]
    Ambiguous {
        /// The word as given.
        given: String,
        /// The options it starts, in the tool's order.
        candidates: Vec<String>,
    },
}

/// One long option of a subcommand: its names (the first is the one clap is given) and whether
/// a value must follow it.
#[derive(Debug)]
struct LongOption {
    names: Vec<String>,
    requires_value: bool,
}

/// Rewrites `args` (a whole command line, program name first) into the spelling clap reads,
/// as described in the module documentation. Words that name no option are left unchanged, so
/// clap's own errors still name them.
pub fn as_jopt_reads(args: Vec<OsString>) -> Result<Vec<OsString>, JoptError> {
    let mut cli = Cli::command();
    cli.build();
    let Some(at) = subcommand_position(&args) else {
        return Ok(args);
    };
    let Some(sub) = args[at].to_str().and_then(|name| cli.find_subcommand(name)) else {
        return Ok(args);
    };
    let name = sub.get_name().to_string();
    if name == "dump-log" {
        return Ok(args
            .into_iter()
            .map(|a| match a.to_str() {
                Some(word) if word.eq_ignore_ascii_case("-noprint") => "--noprint".into(),
                _ => a,
            })
            .collect());
    }
    if NOT_JOPT.contains(&name.as_str()) {
        return Ok(args);
    }
    let options = long_options(sub, &cli);
    let mut out: Vec<OsString> = args[..=at].to_vec();
    let mut rest = args.into_iter().skip(at + 1);
    while let Some(arg) = rest.next() {
        let Some(word) = arg.to_str() else {
            out.push(arg);
            continue;
        };
        if word == "--" {
            out.push(arg);
            out.extend(rest.by_ref());
            break;
        }
        let Some(spelled) = word
            .strip_prefix("--")
            .or_else(|| word.strip_prefix('-').filter(|w| w.chars().count() > 1))
        else {
            out.push(arg);
            continue;
        };
        let (key, value) = match spelled.split_once('=') {
            Some((key, value)) => (key, Some(value)),
            None => (spelled, None),
        };
        let Some(option) = resolve(&options, key, word)? else {
            out.push(arg);
            continue;
        };
        let full = &option.names[0];
        match value {
            Some(value) => out.push(format!("--{full}={value}").into()),
            None if option.requires_value => match rest.next() {
                // Joined, so that clap takes a value starting with `-` as the value.
                Some(next) => {
                    let mut joined = OsString::from(format!("--{full}="));
                    joined.push(next);
                    out.push(joined);
                }
                None => out.push(format!("--{full}").into()),
            },
            None => out.push(format!("--{full}").into()),
        }
    }
    Ok(out)
}

/// Where the subcommand's name is: the first word after the program name and the global
/// options (`--log-format F`, `--log-to S`, or their `=` forms) before it.
fn subcommand_position(args: &[OsString]) -> Option<usize> {
    let mut at = 1;
    while let Some(word) = args.get(at)?.to_str() {
        match word {
            "--log-format" | "--log-to" => at += 2,
            w if w.starts_with('-') => at += 1,
            _ => return Some(at),
        }
    }
    None
}

/// The long options `sub` accepts: its own, the global ones and `--help`.
fn long_options(sub: &clap::Command, cli: &clap::Command) -> Vec<LongOption> {
    let globals = cli.get_arguments().filter(|a| a.is_global_set());
    let mut options: Vec<LongOption> = sub
        .get_arguments()
        .chain(globals)
        .filter_map(|arg| {
            let long = arg.get_long()?;
            let mut names = vec![long.to_string()];
            names.extend(
                arg.get_all_aliases()
                    .unwrap_or_default()
                    .into_iter()
                    .map(str::to_string),
            );
            let requires_value = arg.get_num_args().is_some_and(|n| n.min_values() >= 1)
                && arg.get_action().takes_values();
            Some(LongOption {
                names,
                requires_value,
            })
        })
        .collect();
    // Built, a subcommand lists the global options too: keep each once.
    let mut seen = std::collections::BTreeSet::new();
    options.retain(|o| seen.insert(o.names[0].clone()));
    if !options.iter().any(|o| o.names.iter().any(|n| n == "help")) {
        options.push(LongOption {
            names: vec!["help".to_string()],
            requires_value: false,
        });
    }
    options
}

/// The option `key` names: exactly, or as the prefix of exactly one option. `None` when it
/// names none; an error when it starts several.
fn resolve<'a>(
    options: &'a [LongOption],
    key: &str,
    given: &str,
) -> Result<Option<&'a LongOption>, JoptError> {
    if key.is_empty() {
        return Ok(None);
    }
    if let Some(exact) = options.iter().find(|o| o.names.iter().any(|n| n == key)) {
        return Ok(Some(exact));
    }
    let starting: Vec<&LongOption> = options
        .iter()
        .filter(|o| !EXACT_ONLY.contains(&o.names[0].as_str()))
        .filter(|o| o.names.iter().any(|n| n.starts_with(key)))
        .collect();
    match starting.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(one)),
        many => Err(JoptError::Ambiguous {
            given: given.to_string(),
            candidates: many.iter().map(|o| o.names[0].clone()).collect(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(line: &str) -> Result<Vec<String>, JoptError> {
        let args = std::iter::once("tributary")
            .chain(line.split(' '))
            .map(OsString::from)
            .collect();
        Ok(as_jopt_reads(args)?
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect())
    }

    fn parses(line: &str) -> Result<crate::command::Command, String> {
        let args = read(line).map_err(|e| e.to_string())?;
        <Cli as clap::Parser>::try_parse_from(args)
            .map(|cli| cli.command)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn unique_prefixes_name_their_option_and_exact_names_win() {
        assert_eq!(
            read("console-consumer --zoo h:1 --top t --from").unwrap(),
            [
                "tributary",
                "console-consumer",
                "--zookeeper=h:1",
                "--topic=t",
                "--from-beginning"
            ]
        );
        // `--topic` is exact although nothing else starts with it; `--group` exact too.
        assert_eq!(
            read("console-consumer --topic t --group g").unwrap()[2..],
            ["--topic=t", "--group=g"]
        );
        assert!(parses("console-consumer --zoo h:1 --top t --from --max 5").is_ok());
        assert!(parses("consumer-offset-checker --zk h:1 --gr g").is_ok());
    }

    #[test]
    fn tributarys_added_options_leave_0_7_abbreviations_unique_and_match_only_exactly() {
        // `--zk` is still 0.7.2's `--zkconnect`, `--s` `--server`, though Tributary's
        // `--zk-tls-config-file`, `--security.protocol` and `--ssl.*` start the same way.
        assert_eq!(
            read("consumer-offset-checker --zk h:1 --gr g").unwrap()[2..],
            ["--zkconnect=h:1", "--group=g"]
        );
        assert_eq!(
            read("simple-consumer-shell --s h:1 --t x").unwrap()[2..],
            ["--server=h:1", "--topic=x"]
        );
        // Given whole, they are read; abbreviated, they are left for clap to refuse.
        assert_eq!(
            read("get-offsets --server h:1 --topic x --time -1 --security.protocol ssl").unwrap()
                [2..],
            [
                "--server=h:1",
                "--topic=x",
                "--time=-1",
                "--security.protocol=ssl"
            ]
        );
        assert_eq!(
            read("get-offsets --server h:1 --secur ssl").unwrap()[3..],
            ["--secur", "ssl"]
        );
    }

    #[test]
    fn single_dash_long_options_are_read_as_long_ones() {
        assert_eq!(
            read("console-consumer -zookeeper h:1 -topic=t -from-beginning").unwrap()[2..],
            ["--zookeeper=h:1", "--topic=t", "--from-beginning"]
        );
        assert!(parses("get-offsets -server h:1 -topic t -time -1").is_ok());
        // One letter stays a short option (mirror-status -v).
        assert_eq!(
            read("mirror-status --zkconnect h:1 --group g -v").unwrap()[4..],
            ["-v"]
        );
    }

    #[test]
    fn a_value_starting_with_a_dash_is_the_value_of_the_option_before_it() {
        let Ok(crate::command::Command::ConsoleConsumer(args)) =
            parses("console-consumer --zookeeper h:1 --topic t --max-messages -1")
        else {
            panic!("console-consumer --max-messages -1 was refused");
        };
        assert_eq!(args.max_messages, Some(-1));
        // A word after a flag is not its value.
        assert_eq!(
            read("console-consumer --from-beginning -1").unwrap()[2..],
            ["--from-beginning", "-1"]
        );
    }

    #[test]
    fn an_ambiguous_prefix_is_refused_naming_the_candidates() {
        let err = read("console-consumer --f x").unwrap_err();
        assert_eq!(
            err.to_string(),
            "--f is ambiguous: it could be --from-beginning, --fetch-size, --formatter"
        );
    }

    #[test]
    fn words_that_name_no_option_and_everything_after_a_double_dash_are_left_alone() {
        assert_eq!(
            read("producer-perf --nosuch 1 num_messages -- --top").unwrap()[2..],
            ["--nosuch", "1", "num_messages", "--", "--top"]
        );
        assert!(parses("producer-perf --nosuch 1").is_err());
    }

    #[test]
    fn tools_that_are_not_jopt_tools_keep_their_words() {
        assert_eq!(
            read("update-offsets-in-zk -earliest c.properties t").unwrap()[2..],
            ["-earliest", "c.properties", "t"]
        );
        assert_eq!(
            read("dump-log -NoPrint f.kafka").unwrap()[2..],
            ["--noprint", "f.kafka"]
        );
        assert_eq!(
            read("server -conf x.properties").unwrap()[2..],
            ["-conf", "x.properties"]
        );
    }

    #[test]
    fn global_options_before_the_subcommand_are_skipped() {
        assert_eq!(
            read("--log-format json console-consumer -topic t").unwrap()[4..],
            ["--topic=t"]
        );
        assert_eq!(
            read("console-consumer --log-f json").unwrap()[2..],
            ["--log-format=json"]
        );
    }
}
