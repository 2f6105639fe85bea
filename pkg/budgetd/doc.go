// Package budgetd is the fleet-wide retry budget service: every process
// that retries reports its first attempts and retries and leases retry
// tokens in advance, so that a whole fleet shares one budget per key.
//
// The accounting (Ledger) guarantees, per key and over any interval, that
// the tokens granted to the whole fleet stay within Ratio × the first
// attempts the fleet reported, plus MinPerSecond × the interval, plus the
// cap on saved tokens; and that scarce tokens are shared in proportion to
// each client's first-attempt traffic.
package budgetd
