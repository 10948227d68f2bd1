import Testing
@testable import DBus

@Suite struct SignatureTests {
    @Test(arguments: [
        "", "y", "b", "n", "q", "i", "u", "x", "t", "d", "s", "o", "g", "h", "v",
        "ay", "as", "a{sv}", "a{oa{sa{sv}}}", "(ii)", "a(yv)", "aaai", "a{qv}", "(a{sv}as)", "sa{sv}as",
    ])
    func validSignaturesRoundTrip(_ text: String) throws {
        let sig = try DBusSignature(text)
        #expect(sig.rawValue == text)
        #expect(DBusSignature(sig.types).rawValue == text)
    }

    @Test func parsesNestedTypes() throws {
        let sig = try DBusSignature("a{oa{sa{sv}}}")
        #expect(sig.types == [.dictionary(key: .objectPath, value: .dictionary(key: .string, value: .dictionary(key: .string, value: .variant)))])
    }

    @Test(arguments: [
        ("a", "ends in the middle of a type"),
        ("a{vs}", "dictionary key at position 2 must be a basic type"),
        ("{ss}", "dictionary entry at position 0 outside an array"),
        ("a{s}", "needs exactly a key and a value"),
        ("a{sss}", "is not closed by '}'"),
        ("()", "empty struct at position 0"),
        ("(i", "struct opened at position 0 is not closed"),
        ("i)", "unexpected ')' at position 1"),
        ("z", "unknown type code 'z' at position 0"),
    ])
    func invalidSignaturesSayWhy(_ text: String, _ reason: String) {
        do {
            _ = try DBusSignature(text)
            Issue.record("\(text) was accepted")
        } catch {
            #expect(error.description.contains(reason), "\(error)")
        }
    }

    @Test func depthAndLengthLimits() {
        #expect(throws: DBusError.self) { try DBusSignature(String(repeating: "a", count: 33) + "i") }
        #expect((try? DBusSignature(String(repeating: "a", count: 32) + "i")) != nil)
        #expect(throws: DBusError.self) { try DBusSignature(String(repeating: "(", count: 33) + "i" + String(repeating: ")", count: 33)) }
        #expect(throws: DBusError.self) { try DBusSignature(String(repeating: "i", count: 256)) }
    }
}

@Suite struct NameTests {
    @Test func objectPaths() throws {
        for ok in ["/", "/org", "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF", "/a_1/B2"] {
            _ = try ObjectPath(ok)
        }
        let cases: [(String, String)] = [
            ("", "empty"), ("org", "must begin with '/'"), ("/org/", "must not end with '/'"),
            ("/org//bluez", "empty element at position 5"), ("/org/blue-z", "position 9 is not in [A-Za-z0-9_]"),
        ]
        for (bad, reason) in cases {
            do {
                _ = try ObjectPath(bad)
                Issue.record("accepted \(bad)")
            } catch {
                #expect(error.description.contains(reason), "\(error)")
            }
        }
    }

    @Test func pathRelations() throws {
        // Literals go through ExpressibleByStringLiteral; parse runtime text.
        let text = ["/org/bluez/hci0/dev_11", "/org/bluez/hci0", "/org/bluez", "/org/blu", "/org"]
        let paths = try text.map { try ObjectPath($0) }
        let (dev, adapter, bluez, partial, org) = (paths[0], paths[1], paths[2], paths[3], paths[4])
        #expect(dev.parent == adapter)
        #expect(dev.lastElement == "dev_11")
        #expect(dev.isStrictDescendant(of: bluez))
        #expect(!dev.isDescendant(ofOrEqualTo: partial))
        #expect(dev.isDescendant(ofOrEqualTo: .root))
        #expect(!adapter.isStrictDescendant(of: adapter))
        #expect(adapter.isDescendant(ofOrEqualTo: adapter))
        #expect(org.parent == .root)
    }

    @Test func interfaceBusAndMemberNames() throws {
        try NameValidation.validateInterface("org.bluez.Device1")
        try NameValidation.validateBusName("org.bluez")
        try NameValidation.validateBusName(":1.42")
        try NameValidation.validateBusName("com.example-corp.svc")
        try NameValidation.validateMember("PropertiesChanged")
        #expect(throws: DBusError.self) { try NameValidation.validateInterface("bluez") }
        #expect(throws: DBusError.self) { try NameValidation.validateInterface("org.1bluez") }
        #expect(throws: DBusError.self) { try NameValidation.validateInterface("org..bluez") }
        #expect(throws: DBusError.self) { try NameValidation.validateInterface("org.blue-z") }
        #expect(throws: DBusError.self) { try NameValidation.validateBusName("org.9x") }
        #expect(throws: DBusError.self) { try NameValidation.validateBusName(String(repeating: "a.", count: 130) + "b") }
        #expect(throws: DBusError.self) { try NameValidation.validateMember("2Fast") }
        #expect(throws: DBusError.self) { try NameValidation.validateMember("Read.Value") }
        #expect(throws: DBusError.self) { try NameValidation.validateMember("") }
    }

    @Test func matchRuleStringsAreCanonicalAndQuoted() throws {
        let rule = DBusMatchRule(sender: "org.bluez", interface: "org.freedesktop.DBus.Properties",
                                 member: "PropertiesChanged", pathNamespace: "/org/bluez", arguments: [0: "it's"])
        #expect(rule.description == "type='signal',sender='org.bluez',interface='org.freedesktop.DBus.Properties',member='PropertiesChanged',path_namespace='/org/bluez',arg0='it'\\''s'")
        try rule.validate()
        let bad = DBusMatchRule(path: "/a", pathNamespace: "/b")
        #expect(throws: DBusError.self) { try bad.validate() }
        #expect(throws: DBusError.self) { try DBusMatchRule(arguments: [64: "x"]).validate() }
    }
}
