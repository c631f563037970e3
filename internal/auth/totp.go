package auth

import (
	"crypto/subtle"
	"fmt"
	"strings"
	"time"

	"github.com/boombuler/barcode/qr"
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

// QRCodeSVG returns the otpauth URI as a QR code: an SVG image, black
// modules on white with the four-module quiet zone around them, for the
// authenticator app's camera.
func (e Enrollment) QRCodeSVG() (string, error) {
	code, err := qr.Encode(e.URI, qr.M, qr.Auto)
	if err != nil {
		return "", err
	}
	const quiet = 4
	n := code.Bounds().Dx()
	var b strings.Builder
	size := n + 2*quiet
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" shape-rendering="crispEdges">`, size, size)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#fff"/><path fill="#000" d="`, size, size)
	for y := range n {
		for x := range n {
			if r, _, _, _ := code.At(x, y).RGBA(); r == 0 {
				fmt.Fprintf(&b, "M%d %dh1v1h-1z", x+quiet, y+quiet)
			}
		}
	}
	b.WriteString(`"/></svg>`)
	return b.String(), nil
}
