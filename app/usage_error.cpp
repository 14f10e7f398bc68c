#include "usage_error.hpp"

#include <algorithm>

namespace app {

size_t edit_distance(const std::string& a, const std::string& b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= b.size(); ++j) {
            size_t up = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
            diag = up;
        }
    }
    return row[b.size()];
}

namespace {

// The closest of `names` to `word`, when it is close enough to be what was meant: at most two
// edits, or a third of the word's length for a longer one.
std::string closest(const std::string& word, const std::vector<std::string>& names) {
    std::string best;
    size_t best_d = std::max<size_t>(2, word.size() / 3) + 1;
    for (const std::string& n : names) {
        size_t d = edit_distance(word, n);
        if (d < best_d) {
            best_d = d;
            best = n;
        }
    }
    return best;
}

std::string join(const std::vector<std::string>& v, const char* sep) {
    std::string out;
    for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
    return out;
}

// The options `app` takes, as written on a command line: --long and -s.
std::vector<std::string> option_names(const CLI::App& app) {
    std::vector<std::string> names;
    for (const CLI::Option* o : app.get_options()) {
        for (const std::string& l : o->get_lnames()) names.push_back("--" + l);
        for (const std::string& s : o->get_snames()) names.push_back("-" + s);
    }
    return names;
}

// Whether `word`, an option of `app`, takes the next word as its value (--color auto, not -q).
bool takes_value(const CLI::App& app, const std::string& word) {
    if (word.find('=') != std::string::npos) return false;
    const CLI::Option* o = app.get_option_no_throw(word);
    return o && o->get_items_expected_min() > 0;
}

// The words CLI11 did not expect, from its message ("The following arguments were not expected:
// a b"), which is the one place it names them.
std::vector<std::string> unexpected_words(const CLI::ParseError& error) {
    std::string what = error.what();
    std::vector<std::string> words;
    size_t colon = what.find(": ");
    if (colon == std::string::npos) return words;
    std::string rest = what.substr(colon + 2);
    size_t nl = rest.find('\n');
    if (nl != std::string::npos) rest.resize(nl);
    for (size_t at = 0; at < rest.size();) {
        size_t sp = rest.find(' ', at);
        if (sp == std::string::npos) sp = rest.size();
        if (sp > at) words.push_back(rest.substr(at, sp - at));
        at = sp + 1;
    }
    return words;
}

// "unknown option 'NAME'", with the closest of `names` when one is close enough.
std::string unknown_option(const std::string& name, const std::vector<std::string>& names, bool& meant) {
    std::string best = closest(name, names);
    meant = !best.empty();
    return "unknown option '" + name + "'" + (meant ? " (did you mean '" + best + "'?)" : "");
}

std::string usage_message(const CLI::App& cli, const CLI::ParseError& error, const std::vector<std::string>& args,
                          const std::vector<std::string>& commands, std::string& command) {
    const std::string list = " (commands: " + join(commands, ", ") + ")";
    // The command word: the first word that is neither a global option nor a global option's value.
    // An option before it that is no global one is the first thing wrong (and its value, if it has
    // one, cannot be told from a command).
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (a.empty() || a[0] != '-') {
            command = a;
            break;
        }
        std::string name = a.substr(0, a.find('='));
        if (name.size() > 1 && !cli.get_option_no_throw(name)) {
            bool meant = false;
            std::string out = unknown_option(name, option_names(cli), meant);
            return out + (meant ? "" : " (run 'ckpt-tool --help' for the options and commands)");
        }
        if (takes_value(cli, a)) ++i;
    }
    bool known = std::find(commands.begin(), commands.end(), command) != commands.end();
    if (!command.empty() && !known) {
        std::string word = command;
        command.clear();
        std::string meant = closest(word, commands);
        return "unknown command '" + word + "'" + (meant.empty() ? list : " (did you mean '" + meant + "'?)");
    }
    const CLI::App* app = known ? cli.get_subcommand(command) : &cli;
    const std::string where = known ? command + ": " : "";
    const std::string help = known ? "ckpt-tool " + command + " --help" : "ckpt-tool --help";
    if (dynamic_cast<const CLI::ExtrasError*>(&error)) {
        std::vector<std::string> options, others;
        for (const std::string& w : unexpected_words(error)) (w.size() > 1 && w[0] == '-' ? options : others).push_back(w);
        std::reverse(options.begin(), options.end());  // CLI11 names them last first
        std::reverse(others.begin(), others.end());
        if (!options.empty()) {
            std::vector<std::string> known_options = option_names(*app);
            if (known) {
                std::vector<std::string> global = option_names(cli);
                known_options.insert(known_options.end(), global.begin(), global.end());
            }
            std::string out;
            bool all_meant = true;
            for (const std::string& o : options) {
                bool meant = false;
                out += (out.empty() ? "" : "; ") + unknown_option(o.substr(0, o.find('=')), known_options, meant);
                all_meant = all_meant && meant;
            }
            return where + out + (all_meant ? "" : " (run '" + help + "' for its options)");
        }
        std::string quoted;
        for (const std::string& w : others) quoted += (quoted.empty() ? "'" : ", '") + w + "'";
        return where + "unexpected argument" + (others.size() > 1 ? "s " : " ") + quoted + " (run '" + help + "')";
    }
    if (!known && (args.empty() || dynamic_cast<const CLI::RequiredError*>(&error))) return "no command given" + list;
    std::string what = error.what();
    size_t nl = what.find('\n');
    if (nl != std::string::npos) what.resize(nl);
    return where + what + " (run '" + help + "')";
}

}  // namespace

UsageError usage_error(const CLI::App& cli, const CLI::ParseError& error, const std::vector<std::string>& args,
                       const std::vector<std::string>& commands) {
    UsageError u;
    u.message = usage_message(cli, error, args, commands, u.command);
    for (size_t i = 0; i < args.size(); ++i)
        u.json = u.json || args[i] == "--json" || args[i] == "--format=json" ||
                 (args[i] == "--format" && i + 1 < args.size() && args[i + 1] == "json");
    return u;
}

}  // namespace app
