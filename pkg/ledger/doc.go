// Package ledger is the accounting of Levee's fleet-wide retry budget: the
// Settings of one budget key, the Ledger that budgetd's leader keeps for
// it, and the grammar of the names a budget is kept under (keys and client
// IDs, ValidateName), which the client and budgetd check alike. Every
// process that retries reports its first attempts and retries; the ledger
// turns them into retry tokens and splits those among the reporting
// processes.
//
// A Ledger guarantees, per key and over any interval, that the tokens
// granted to the whole fleet stay within Ratio × the first attempts the
// fleet reported (and did not already earn on locally), plus MinPerSecond ×
// the interval, plus the cap on saved tokens; and that scarce tokens are
// shared in proportion to each client's first-attempt traffic.
//
// The package has no I/O and no clock of its own: callers pass the time, so
// budgetd, its test double (pkg/budget/budgettest) and the lab's simulator
// (in the lab module, lab/) run the one algorithm.
package ledger
