import Foundation

/// Removes each of `folders` under `directory` (as `rm -rf` would), again
/// and again as fast as it can, for `milliseconds`; then says how many
/// rounds it made: "removed ROUNDS".
///
/// A forked `rm` per removal leaves the other side milliseconds between
/// removals; this leaves it microseconds, which is what finds a step that
/// assumes a folder it just made is still there.
func removeRepeatedly(in directory: String, folders: [String], milliseconds: Int) {
    let deadline = Date().addingTimeInterval(Double(milliseconds) / 1_000)
    var rounds = 0
    while Date() < deadline {
        for folder in folders {
            // Gone already, or emptied by someone else meanwhile: the next round.
            try? FileManager.default.removeItem(atPath: directory + "/" + folder)
        }
        rounds += 1
    }
    say("removed \(rounds)")
}
