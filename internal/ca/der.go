package ca

import (
	"errors"
	"math/big"
	"time"
	"unicode/utf8"
)

// The few DER (X.690) encodings the leaf encoder (leaf.go) writes by
// hand: a tag, a definite length, and the primitive values of a leaf
// certificate. Everything else of a leaf is encoded once per signing key
// with encoding/asn1.

// DER tags (universal class unless said otherwise).
const (
	tagInteger         = 0x02
	tagBitString       = 0x03
	tagOctetString     = 0x04
	tagOID             = 0x06
	tagUTF8String      = 0x0c
	tagPrintableString = 0x13
	tagUTCTime         = 0x17
	tagGeneralizedTime = 0x18
	tagSequence        = 0x30 // constructed
	tagSet             = 0x31 // constructed
	// Context-specific tags of a certificate and its names.
	tagExplicit0   = 0xa0 // TBSCertificate.version
	tagExplicit3   = 0xa3 // TBSCertificate.extensions
	tagDNSName     = 0x82 // GeneralName dNSName, IMPLICIT IA5String
	tagURIName     = 0x86 // GeneralName uniformResourceIdentifier, IMPLICIT IA5String
	tagImplicitKey = 0x80 // AuthorityKeyIdentifier.keyIdentifier, IMPLICIT OCTET STRING
)

// appendLength appends a DER definite length: one octet below 128, else
// 0x80 | the number of octets that follow, then the length big-endian in
// as few octets as it takes.
func appendLength(b []byte, n int) []byte {
	if n < 0x80 {
		return append(b, byte(n))
	}
	var octets int
	for v := n; v > 0; v >>= 8 {
		octets++
	}
	b = append(b, 0x80|byte(octets))
	for i := octets - 1; i >= 0; i-- {
		b = append(b, byte(n>>(8*i)))
	}
	return b
}

// appendHeader appends the tag and length of an element whose contents,
// n octets, the caller appends next.
func appendHeader(b []byte, tag byte, n int) []byte {
	return appendLength(append(b, tag), n)
}

// tlvSize is the size of an element with n octets of contents: tag,
// length and contents.
func tlvSize(n int) int {
	if n < 0x80 {
		return 2 + n
	}
	size := 2 + n // the tag, and 0x80 | the count of length octets
	for v := n; v > 0; v >>= 8 {
		size++
	}
	return size
}

// appendTLV appends one element: its tag, its length and the contents,
// which are the concatenation of parts.
func appendTLV(b []byte, tag byte, parts ...[]byte) []byte {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	b = append(b, tag)
	b = appendLength(b, n)
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// appendPositiveInteger appends n, which must be positive, as a DER
// INTEGER: big-endian in the fewest octets, with a leading zero octet
// when the top bit is set so that it does not read as negative.
func appendPositiveInteger(b []byte, n *big.Int) ([]byte, error) {
	if n == nil || n.Sign() <= 0 {
		return nil, errors.New("serial: not a positive integer")
	}
	v := n.Bytes()
	if v[0]&0x80 != 0 {
		return appendTLV(b, tagInteger, []byte{0}, v), nil
	}
	return appendTLV(b, tagInteger, v), nil
}

// appendTime appends t as RFC 5280 (4.1.2.5) wants a certificate's
// validity: in UTC to the second, a UTCTime (YYMMDDHHMMSSZ) from 1950
// through 2049 and a GeneralizedTime (YYYYMMDDHHMMSSZ) otherwise, which
// is also what encoding/asn1 writes for a time.Time.
func appendTime(b []byte, t time.Time) []byte {
	t = t.UTC()
	var buf [15]byte
	if y := t.Year(); y >= 1950 && y < 2050 {
		return appendTLV(b, tagUTCTime, t.AppendFormat(buf[:0], "060102150405Z"))
	}
	return appendTLV(b, tagGeneralizedTime, t.AppendFormat(buf[:0], "20060102150405Z"))
}

// appendDirectoryString appends s as encoding/asn1 writes a Go string in
// a distinguished name: a PrintableString when every character is one
// (letters, digits, space and '()+,-./:=?), else a UTF8String. Invalid
// UTF-8 is refused.
func appendDirectoryString(b []byte, s string) ([]byte, error) {
	tag := byte(tagPrintableString)
	for i := 0; i < len(s); i++ {
		if !isPrintableStringChar(s[i]) {
			tag = tagUTF8String
			break
		}
	}
	if tag == tagUTF8String && !utf8.ValidString(s) {
		return nil, errors.New("subject: the common name is not valid UTF-8")
	}
	return append(appendHeader(b, tag, len(s)), s...), nil
}

// isPrintableStringChar reports whether c may stand in a PrintableString
// (X.680, 41.4), as encoding/asn1's writer judges it: no '*' or '&'.
func isPrintableStringChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		'\'' <= c && c <= ')' || '+' <= c && c <= '/' ||
		c == ' ' || c == ':' || c == '=' || c == '?'
}

// appendIA5 appends s under tag (an IMPLICIT IA5String of a GeneralName),
// refusing a character outside ASCII: RFC 5280 names are IA5.
func appendIA5(b []byte, tag byte, s string) ([]byte, error) {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return nil, errors.New("subject alternative name: " + s + " is not ASCII (IA5)")
		}
	}
	return append(appendHeader(b, tag, len(s)), s...), nil
}
