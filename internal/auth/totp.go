package auth

import (
	"crypto/subtle"
	"time"

	"github.com/pquerna/otp"
	"github.com/pquerna/otp/totp"
)

// TOTP parameters (RFC 6238 defaults that every authenticator app supports).
const (
	totpPeriod = 30
	totpDigits = otp.DigitsSix
	totpSkew   = 1 // steps accepted either side of the current one
)

// Enrollment is what a user needs to set up their authenticator app.
type Enrollment struct {
	Secret string // base32, no padding
	URI    string // otpauth://totp/…
}

func newEnrollment(issuer, email string) (Enrollment, error) {
	key, err := totp.Generate(totp.GenerateOpts{
		Issuer:      issuer,
		AccountName: email,
		Period:      totpPeriod,
		SecretSize:  20,
		Digits:      totpDigits,
		Algorithm:   otp.AlgorithmSHA1,
	})
	if err != nil {
		return Enrollment{}, err
	}
	return Enrollment{Secret: key.Secret(), URI: key.URL()}, nil
}

// TOTPCode returns the code for secret at time t. Tests and the CLI use it.
func TOTPCode(secret string, t time.Time) (string, error) {
	return totp.GenerateCodeCustom(secret, t, totp.ValidateOpts{Period: totpPeriod, Digits: totpDigits, Algorithm: otp.AlgorithmSHA1})
}

// matchTOTP returns the time step whose code equals code, within ±totpSkew
// steps of now, or 0 if none matches.
func matchTOTP(secret, code string, now time.Time) int64 {
	cur := now.Unix() / totpPeriod
	var found int64
	for step := cur - totpSkew; step <= cur+totpSkew; step++ {
		want, err := TOTPCode(secret, time.Unix(step*totpPeriod, 0))
		if err != nil {
			return 0
		}
		// Compare every candidate so timing does not tell which step matched.
		if subtle.ConstantTimeCompare([]byte(want), []byte(code)) == 1 {
			found = step
		}
	}
	return found
}
